#include "server/worker/program_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/worker/kv_store.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/program_run.h"

namespace meshserve {

ProgramRunner::ProgramRunner(Options options, PeerTransport* transport,
                             const ModelStore* models)
    : options_(std::move(options)),
      transport_(transport),
      models_(models),
      rendezvous_(options_.rendezvous),
      kv_(options_.kv_cache_bytes > 0 ? std::make_unique<KvCacheStore>(options_.kv_cache_bytes)
                                      : nullptr) {}

ProgramRunner::~ProgramRunner() {
  // Runs waiting on a peer end now (their done callbacks run here).
  rendezvous_.FailAll(absl::CancelledError("worker shutting down"));
}

absl::Status ProgramRunner::Install(ProgramIr program) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<InstalledProgram> installed,
                      PrepareProgram(std::move(program)));
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const InstalledProgram>& slot = programs_[installed->ir.program_id];
  if (slot != nullptr) {  // what the install it replaces kept goes with it
    models_->ForgetKept(slot->ir.model, slot->ir.generation, slot->cache_key);
  }
  slot = std::move(installed);
  return absl::OkStatus();
}

absl::Status ProgramRunner::Uninstall(absl::string_view program_id) {
  absl::MutexLock lock(&mu_);
  auto p = programs_.find(program_id);
  if (p == programs_.end()) {
    return NotFound("unknown program '", program_id, "' (", programs_.size(), " installed)");
  }
  // What its runs kept goes with it, as when an install replaces it.
  models_->ForgetKept(p->second->ir.model, p->second->ir.generation, p->second->cache_key);
  programs_.erase(p);
  return absl::OkStatus();
}

void ProgramRunner::DropPrograms(absl::string_view model,
                                 const std::vector<int64_t>& generations) {
  if (generations.empty()) return;
  absl::MutexLock lock(&mu_);
  for (auto p = programs_.begin(); p != programs_.end();) {
    auto program = p++;
    const ProgramIr& ir = program->second->ir;
    if (ir.model == model && absl::c_linear_search(generations, ir.generation)) {
      programs_.erase(program);
    }
  }
}

void ProgramRunner::DropKvCaches(absl::string_view model, int64_t generation) {
  if (kv_ != nullptr) kv_->Drop(std::string(model), generation);
}

void ProgramRunner::ReleaseKvSequences(absl::string_view model, int64_t generation,
                                       const std::vector<int64_t>& seqs) {
  if (kv_ != nullptr) kv_->Release(std::string(model), generation, seqs);
}

int64_t ProgramRunner::num_programs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(programs_.size());
}

int64_t ProgramRunner::requests_served() const {
  absl::MutexLock lock(&mu_);
  return requests_served_;
}

absl::StatusOr<std::vector<SliceIr>> ProgramRunner::Execute(
    absl::string_view program_id, absl::string_view request_id, std::vector<SliceIr> inputs,
    absl::Duration timeout, int64_t param_version, ParamCacheMode param_cache) {
  absl::Notification finished;
  absl::StatusOr<std::vector<SliceIr>> result;
  ExecuteAsync(program_id, std::string(request_id), std::move(inputs), timeout, param_version,
               param_cache,
               [&](absl::StatusOr<std::vector<SliceIr>> out) {
                 result = std::move(out);
                 finished.Notify();
               },
               nullptr);
  finished.WaitForNotification();
  return result;
}

absl::Status ProgramRunner::Resolve(absl::string_view program_id, int64_t param_version,
                                    std::shared_ptr<const InstalledProgram>* program,
                                    std::shared_ptr<const LoadedModel>* model) const {
  {
    absl::MutexLock lock(&mu_);
    auto p = programs_.find(program_id);
    if (p == programs_.end()) {
      return NotFound("unknown program '", program_id, "' (", programs_.size(),
                      " installed)");
    }
    *program = p->second;
  }
  const ProgramIr& ir = (*program)->ir;
  *model = models_->Find(ir.model, ir.generation, param_version);
  if (*model != nullptr) return absl::OkStatus();
  if (models_->Find(ir.model, ir.generation, 0) == nullptr) {
    return FailedPrecondition("program '", program_id, "': model '", ir.model,
                              "' generation ", ir.generation, " is not loaded on this worker");
  }
  return NotFound("program '", program_id, "': model '", ir.model, "' generation ",
                  ir.generation, " version ", param_version, " is not resident on this worker");
}

void ProgramRunner::ExecuteAsync(absl::string_view program_id, std::string request_id,
                                 std::vector<SliceIr> inputs, absl::Duration timeout,
                                 int64_t param_version, ParamCacheMode param_cache, Done done,
                                 std::shared_ptr<const DecodeStepIr> decode) {
  if (request_id.empty()) return done(InvalidArgument("request_id is empty"));
  const absl::Time deadline =
      absl::Now() + (timeout > absl::ZeroDuration() ? timeout : options_.default_deadline);
  std::shared_ptr<const InstalledProgram> program;
  std::shared_ptr<const LoadedModel> model;
  if (absl::Status found = Resolve(program_id, param_version, &program, &model); !found.ok()) {
    return done(std::move(found));
  }
  // A program without param-only steps runs whole in any mode.
  if (!program->param_only.any()) param_cache = ParamCacheMode::kOff;
  std::shared_ptr<const KeptBuffers> kept;
  if (param_cache == ParamCacheMode::kUse) {
    kept = model->kept_params.Find(program->cache_key);
    if (kept == nullptr) {
      return done(FailedPrecondition("program '", program_id, "': nothing kept for ",
                                     model->Name(), " (param_cache USE before a FILL of this ",
                                     "version on worker ", models_->worker_id(), ")"));
    }
  }
  absl::StatusOr<std::shared_ptr<const DecodeState>> decode_state = nullptr;
  if (decode != nullptr) {
    decode_state = PrepareDecode(program->ir, *model, inputs, *decode, kv_.get());
    if (!decode_state.ok()) return done(decode_state.status());
  }
  if (absl::Status started = rendezvous_.StartRequest(request_id); !started.ok()) {
    return done(std::move(started));
  }
  // Quick programs (measured by their last run) stay on this thread and on
  // the delivering threads; the others go to the executor.
  const int64_t last_ns = program->last_compute_ns.load();
  const bool quick = last_ns >= 0 && absl::Nanoseconds(last_ns) < kInlineComputeLimit;
  RunContext context{&rendezvous_, transport_, models_->worker_id(), &timer_,
                     quick ? nullptr : options_.executor, param_cache, std::move(kept),
                     *std::move(decode_state)};
  auto finish = [this, id = request_id, program_id = std::string(program_id),
                 done = std::move(done)](absl::StatusOr<std::vector<SliceIr>> outputs) {
    rendezvous_.FinishRequest(id);
    {
      absl::MutexLock lock(&mu_);
      ++requests_served_;
    }
    if (!outputs.ok()) {
      outputs = AnnotateStatus(outputs.status(), "worker ", models_->worker_id(), " program '",
                               program_id, "' request '", id, "'");
    }
    done(std::move(outputs));
  };
  auto start = [program = std::move(program), model = std::move(model),
                id = std::move(request_id), inputs = std::move(inputs), deadline,
                context = std::move(context), finish = std::move(finish)]() mutable {
    RunProgramAsync(std::move(program), std::move(model), std::move(id), std::move(inputs),
                    deadline, std::move(context), std::move(finish));
  };
  if (quick || options_.executor == nullptr) {
    start();
  } else {
    options_.executor(std::move(start));
  }
}

int64_t DefaultMaxInflightSliceBytes(int64_t mem_total_bytes, int64_t host_workers) {
  constexpr int64_t kMin = int64_t{64} << 20, kMax = int64_t{4} << 30;
  const int64_t share =
      std::max<int64_t>(mem_total_bytes, 0) / 4 / std::max<int64_t>(host_workers, 1);
  return std::clamp(share, kMin, kMax);
}

}  // namespace meshserve
