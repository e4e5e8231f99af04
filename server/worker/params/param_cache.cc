#include "server/worker/params/param_cache.h"

#include <cstddef>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"
#include "common/metrics/metric_registry.h"

namespace meshserve {
namespace {

// The bytes every loaded version of this process keeps, on the worker's
// /metrics: the memory the param cache costs (the coordinator's
// --param_cache_bytes bounds it over all programs).
Gauge& KeptBytes() {
  static Gauge* const bytes = &GlobalMetricRegistry().AddGauge(
      "meshserve_worker_param_cache_bytes",
      "Bytes of param-only buffers (e.g. all-gathered kernels) kept with their param "
      "version for later requests.");
  return *bytes;
}
// Registered at start-up, so /metrics lists the family before the first keep.
[[maybe_unused]] const Gauge& kept_bytes_registered = KeptBytes();

struct Writers {
  int all = 0;
  int marked = 0;
};

}  // namespace

absl::StatusOr<ParamOnlySteps> AnalyzeParamOnlySteps(const ProgramIr& program) {
  const std::string where = absl::StrCat("program '", program.program_id, "'");
  ParamOnlySteps out;
  out.marked.assign(program.steps.size(), false);
  int64_t last = -1;
  for (int64_t i : program.param_only_steps) {
    if (i <= last || i >= static_cast<int64_t>(program.steps.size())) {
      return InvalidArgument(where, ": param_only_steps entry ", i, " is out of order or ",
                             "outside its ", program.steps.size(), " steps");
    }
    if (std::holds_alternative<OutputStepIr>(program.steps[i])) {
      return InvalidArgument(where, ": param_only step ", i, " is an output step");
    }
    out.marked[i] = true;
    last = i;
  }
  if (program.param_only_steps.empty()) return out;
  std::vector<StepAccess> access;
  access.reserve(program.steps.size());
  absl::flat_hash_map<RunBufferKey, Writers> writers;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    access.push_back(AccessOf(program.steps[i]));
    if (const auto& w = access.back().writes) {
      Writers& count = writers[*w];
      ++count.all;
      if (out.marked[i]) ++count.marked;
    }
  }
  auto param_only = [&](const RunBufferKey& key) {
    if (IsParamBuffer(key.second)) return true;
    auto it = writers.find(key);
    return it != writers.end() && it->second.all == it->second.marked;
  };
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const StepIr& step = program.steps[i];
    if (!out.marked[i]) {
      for (const RunBufferKey& key : access[i].reads) {
        if (!IsParamBuffer(key.second) && param_only(key)) out.kept.insert(key);
      }
      continue;
    }
    std::vector<RunBufferKey> checked = access[i].reads;
    if (access[i].frees) checked.push_back(*access[i].frees);
    if (std::holds_alternative<RecvStepIr>(step)) checked.clear();  // the peer's to check
    if (access[i].writes) checked.push_back(*access[i].writes);
    for (const RunBufferKey& key : checked) {
      if (!param_only(key)) {
        return InvalidArgument(where, ": param_only step ", i, " touches buffer '", key.second,
                               "' of device ", key.first,
                               ", which a step that is not param_only writes");
      }
    }
  }
  return out;
}

void ReorderSteps(const std::vector<size_t>& order, ProgramIr* program, ParamOnlySteps* steps) {
  std::vector<StepIr> reordered;
  reordered.reserve(order.size());
  std::vector<bool> marked(order.size());
  program->param_only_steps.clear();
  for (size_t i = 0; i < order.size(); ++i) {
    reordered.push_back(std::move(program->steps[order[i]]));
    marked[i] = steps->marked[order[i]];
    if (marked[i]) program->param_only_steps.push_back(static_cast<int64_t>(i));
  }
  program->steps = std::move(reordered);
  steps->marked = std::move(marked);
}

std::shared_ptr<const KeptBuffers> KeptParamBuffers::Find(const std::string& program_id) const {
  absl::MutexLock lock(&mu_);
  auto it = kept_.find(program_id);
  return it == kept_.end() ? nullptr : it->second.buffers;
}

void KeptParamBuffers::Keep(const std::string& program_id,
                            std::shared_ptr<const KeptBuffers> buffers) const {
  int64_t bytes = 0;
  for (const auto& [key, buffer] : *buffers) bytes += buffer.tensor.NumBytes();
  absl::MutexLock lock(&mu_);
  if (!kept_.try_emplace(program_id, Entry{std::move(buffers), bytes}).second) return;
  bytes_ += bytes;
  KeptBytes().Add({}, static_cast<double>(bytes));
}

void KeptParamBuffers::Drop(const std::string& program_id) const {
  absl::MutexLock lock(&mu_);
  auto it = kept_.find(program_id);
  if (it == kept_.end()) return;
  const int64_t bytes = it->second.bytes;
  kept_.erase(it);
  bytes_ -= bytes;
  KeptBytes().Add({}, -static_cast<double>(bytes));
}

KeptParamBuffers::~KeptParamBuffers() {
  absl::MutexLock lock(&mu_);
  if (bytes_ > 0) KeptBytes().Add({}, -static_cast<double>(bytes_));
}

int64_t KeptParamBuffers::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace meshserve
