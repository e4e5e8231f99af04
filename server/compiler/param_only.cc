// MarkParamOnlySteps (param_only.h): the largest marking, by dropping steps
// that violate a rule and propagating each drop to the steps it invalidates.
#include "server/compiler/param_only.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "common/base/dtype.h"
#include "common/program/ir_conv.h"
#include "common/program/program_ir.h"

namespace meshserve {
namespace {

// Buffers and steps of all workers, numbered: a step's id grows with its
// index within its worker, so "after" on one worker is "larger id".
struct PoStep {
  int64_t worker = 0;
  int64_t index = 0;  // into the worker's steps
  const StepIr* step = nullptr;
  std::vector<int> reads;  // buffer ids
  int writes = -1;         // buffer id (compute, recv, copy)
  int frees = -1;          // buffer id (free)
  int partner = -1;        // step id of the matching recv (send) or send (recv)
};

struct PoBuffer {
  int64_t worker = 0;
  bool named_param = false;
  bool named_input = false;
  std::vector<int> writers, readers, frees;  // step ids, ascending
  bool invalidated = false;                   // has an unmarked writer (Propagate)
  // A "param/" buffer the program never writes: LoadModel's, read-only.
  bool Resident() const { return named_param && writers.empty(); }
};

int64_t BoxElements(const BoxIr& box) {
  if (box.begin.size() != box.end.size()) return 0;
  int64_t n = 1;  // rank 0: a scalar
  for (size_t i = 0; i < box.begin.size(); ++i) {
    n *= std::max<int64_t>(0, box.end[i] - box.begin[i]);
  }
  return n;
}

class ParamOnlyGraph {
 public:
  explicit ParamOnlyGraph(const std::map<int64_t, ProgramIr>& programs) {
    for (const auto& [worker, program] : programs) {
      for (size_t i = 0; i < program.steps.size(); ++i) {
        AddStep(worker, static_cast<int64_t>(i), program.steps[i]);
      }
    }
    PairSendsAndRecvs();
  }

  // Computes M (param_only.h) into marked_.
  void Solve() {
    marked_.assign(steps_.size(), true);
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (!Eligible(steps_[s])) Drop(static_cast<int>(s));
    }
    while (!work_.empty()) {
      int s = work_.back();
      work_.pop_back();
      Propagate(s);
    }
  }

  void WriteMarks(std::map<int64_t, ProgramIr>* programs) const {
    for (auto& [worker, program] : *programs) program.param_only_steps.clear();
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (marked_[s]) (*programs)[steps_[s].worker].param_only_steps.push_back(steps_[s].index);
    }
  }

  // The bytes of the kept buffers of the worker that keeps the most.
  int64_t MaxKeptBytes() const {
    std::map<int64_t, int64_t> by_worker;
    for (size_t b = 0; b < buffers_.size(); ++b) {
      if (!ParamOnly(static_cast<int>(b)) || ReadInPlace(static_cast<int>(b))) continue;
      const std::vector<int>& readers = buffers_[b].readers;
      bool kept = std::any_of(readers.begin(), readers.end(), [&](int r) { return !marked_[r]; });
      if (kept) by_worker[buffers_[b].worker] += BufferBytes(static_cast<int>(b));
    }
    int64_t most = 0;
    for (const auto& [worker, bytes] : by_worker) most = std::max(most, bytes);
    return most;
  }

 private:
  int BufferId(int64_t worker, int64_t device, const std::string& name) {
    auto [it, inserted] = buffer_ids_.try_emplace({worker, device, name},
                                                  static_cast<int>(buffers_.size()));
    if (inserted) {
      PoBuffer& b = buffers_.emplace_back();
      b.worker = worker;
      b.named_param = IsParamBuffer(name);
      b.named_input = absl::StartsWith(name, kInputBufferPrefix);
    }
    return it->second;
  }

  void AddStep(int64_t worker, int64_t index, const StepIr& step) {
    const int id = static_cast<int>(steps_.size());
    steps_.push_back(PoStep{worker, index, &step});
    auto read = [&](int64_t device, const std::string& name) {
      int b = BufferId(worker, device, name);
      steps_[id].reads.push_back(b);
      buffers_[b].readers.push_back(id);
    };
    auto write = [&](int64_t device, const std::string& name) {
      int b = BufferId(worker, device, name);
      steps_[id].writes = b;
      buffers_[b].writers.push_back(id);
    };
    // A copy's source is its first read: the dtype rule reads it as the source.
    const StepAccess access = AccessOf(step);
    for (const auto& [device, name] : access.reads) read(device, name);
    if (access.writes) write(access.writes->first, access.writes->second);
    if (access.frees) {
      int b = BufferId(worker, access.frees->first, access.frees->second);
      steps_[id].frees = b;
      buffers_[b].frees.push_back(id);
    }
  }

  // Partners: one send and one recv per tag, the recv on the send's dst_worker.
  void PairSendsAndRecvs() {
    std::map<std::string, std::vector<int>> sends, recvs;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (const auto* send = std::get_if<SendStepIr>(steps_[s].step)) {
        sends[send->tag].push_back(static_cast<int>(s));
      } else if (const auto* recv = std::get_if<RecvStepIr>(steps_[s].step)) {
        recvs[recv->tag].push_back(static_cast<int>(s));
      }
    }
    for (const auto& [tag, send_ids] : sends) {
      auto it = recvs.find(tag);
      if (send_ids.size() != 1 || it == recvs.end() || it->second.size() != 1) continue;
      int send = send_ids[0], recv = it->second[0];
      if (std::get<SendStepIr>(*steps_[send].step).dst_worker != steps_[recv].worker) continue;
      steps_[send].partner = recv;
      steps_[recv].partner = send;
    }
  }

  // The rules that need no other step's mark (param_only.h (1)-(3)).
  bool Eligible(const PoStep& s) const {
    if (std::holds_alternative<OutputStepIr>(*s.step)) return false;
    // positions read a generation step's positions (decode_step.h): never kept.
    if (const auto* c = std::get_if<ComputeStepIr>(s.step); c != nullptr &&
        c->op == ComputeOp::kPositions) {
      return false;
    }
    bool paired = std::holds_alternative<SendStepIr>(*s.step) ||
                  std::holds_alternative<RecvStepIr>(*s.step);
    if (paired && s.partner < 0) return false;
    for (int b : s.reads) {
      const PoBuffer& buf = buffers_[b];
      if (buf.Resident()) continue;
      if (buf.named_param || buf.named_input || buf.writers.empty()) return false;
    }
    for (int b : {s.writes, s.frees}) {
      if (b < 0) continue;
      const PoBuffer& buf = buffers_[b];
      if (buf.named_param || buf.named_input || buf.writers.empty()) return false;
    }
    return true;
  }

  void Drop(int s) {
    if (!marked_[s]) return;
    marked_[s] = false;
    work_.push_back(s);
  }

  // What the unmarking of s invalidates: the buffer it writes is no longer
  // param-only (its other writers, readers and frees go); its partner goes;
  // and every buffer it reads must be complete before it, so a later writer
  // goes (param_only.h (4)), and with it all writers. Each buffer's users are
  // visited once: the solve is linear in the steps' reads and writes.
  void Propagate(int s) {
    const PoStep& step = steps_[s];
    if (step.writes >= 0 && !buffers_[step.writes].invalidated) {
      PoBuffer& b = buffers_[step.writes];
      b.invalidated = true;
      for (const std::vector<int>* users : {&b.writers, &b.readers, &b.frees}) {
        for (int u : *users) Drop(u);
      }
    }
    if (step.partner >= 0) Drop(step.partner);
    for (int b : step.reads) {
      const std::vector<int>& writers = buffers_[b].writers;  // ascending
      if (!writers.empty() && writers.back() > s) Drop(writers.back());
    }
  }

  bool ParamOnly(int b) const {
    const PoBuffer& buf = buffers_[b];
    if (buf.named_param || buf.named_input || buf.writers.empty()) return false;
    return std::all_of(buf.writers.begin(), buf.writers.end(), [&](int w) { return marked_[w]; });
  }

  // A buffer the worker never makes (param_only.h): its one writer is a copy
  // of a resident param's slice that ParamSliceBoxOf accepts (ir_conv.h),
  // and every step reading it reads it in place (ReadsInPlace,
  // compute_step.h) as input 1 only.
  bool ReadInPlace(int b) const {
    const PoBuffer& buf = buffers_[b];
    if (buf.writers.size() != 1) return false;
    const PoStep& writer = steps_[buf.writers[0]];
    const auto* copy = std::get_if<CopyStepIr>(writer.step);
    if (copy == nullptr || !ParamSliceBoxOf(*copy).has_value() ||
        !buffers_[writer.reads[0]].Resident()) {
      return false;
    }
    return std::all_of(buf.readers.begin(), buf.readers.end(), [&](int r) {
      const auto* c = std::get_if<ComputeStepIr>(steps_[r].step);
      const std::vector<int>& in = steps_[r].reads;
      return c != nullptr && ReadsInPlace(*c, 1) && in.size() == 2 && in[1] == b && in[0] != b;
    });
  }

  // The writer whose box and dtype the buffer has: a compute replaces the
  // buffer, a recv or copy creates it only when absent.
  int Maker(int b) const {
    int maker = -1;
    for (int w : buffers_[b].writers) {
      if (maker < 0 || std::holds_alternative<ComputeStepIr>(*steps_[w].step)) maker = w;
    }
    return maker;
  }

  // The buffer's dtype, resolving unset ones as the worker does
  // (compute_step.cc, program_run.cc); depth bounds malformed cycles.
  DType DTypeOf(int b, int depth) const {
    int m = Maker(b);
    if (m < 0 || depth > 64) return DType::kFloat32;  // a resident param: not in the plan
    const PoStep& maker = steps_[m];
    if (const auto* c = std::get_if<ComputeStepIr>(maker.step)) {
      if (c->partial || (!c->out_dtype.has_value() && maker.reads.empty())) {
        return DType::kFloat32;
      }
      if (c->out_dtype.has_value()) return *c->out_dtype;
      return DTypeOf(maker.reads[0], depth + 1);
    }
    if (const auto* r = std::get_if<RecvStepIr>(maker.step)) {
      return r->dtype.value_or(DType::kFloat32);  // unset: the worker rejects it
    }
    const auto& cp = std::get<CopyStepIr>(*maker.step);
    return cp.dtype.has_value() ? *cp.dtype : DTypeOf(maker.reads[0], depth + 1);
  }

  int64_t BufferBytes(int b) const {
    const StepIr& maker = *steps_[Maker(b)].step;
    const BoxIr* box = nullptr;
    if (const auto* c = std::get_if<ComputeStepIr>(&maker)) box = &c->out_box;
    if (const auto* r = std::get_if<RecvStepIr>(&maker)) box = &r->buffer_box;
    if (const auto* cp = std::get_if<CopyStepIr>(&maker)) box = &cp->dst_box;
    return BoxElements(*box) * DTypeSize(DTypeOf(b, 0));
  }

  std::vector<PoStep> steps_;
  std::vector<PoBuffer> buffers_;
  std::map<std::tuple<int64_t, int64_t, std::string>, int> buffer_ids_;
  std::vector<bool> marked_;
  std::vector<int> work_;
};

}  // namespace

void MarkParamOnlySteps(CompiledPlan* plan) {
  ParamOnlyGraph graph(plan->programs);
  graph.Solve();
  graph.WriteMarks(&plan->programs);
  plan->kept_param_bytes = graph.MaxKeptBytes();
}

}  // namespace meshserve
