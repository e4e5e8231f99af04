// WorkerEngine's program runner (worker_engine.h): installing programs and
// running them for requests, generation steps included. The model and param
// store half is worker_engine.cc.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/worker/worker_engine.h"
#include "server/worker/worker_engine_internal.h"

namespace meshserve {

absl::Status WorkerEngine::InstallProgram(ProgramIr program) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<InstalledProgram> installed,
                      PrepareProgram(std::move(program)));
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const InstalledProgram>& slot = programs_[installed->ir.program_id];
  if (slot != nullptr) {  // what the install it replaces kept goes with it
    auto m = models_.find(ModelKey(slot->ir.model, slot->ir.generation));
    if (m != models_.end()) {
      for (const auto& [version, model] : m->second) model->kept_params.Drop(slot->cache_key);
    }
  }
  slot = std::move(installed);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SliceIr>> WorkerEngine::Execute(absl::string_view program_id,
                                                           absl::string_view request_id,
                                                           std::vector<SliceIr> inputs,
                                                           absl::Duration timeout,
                                                           int64_t param_version,
                                                           ParamCacheMode param_cache) {
  absl::Notification finished;
  absl::StatusOr<std::vector<SliceIr>> result;
  ExecuteAsync(program_id, std::string(request_id), std::move(inputs), timeout, param_version,
               param_cache, [&](absl::StatusOr<std::vector<SliceIr>> out) {
                 result = std::move(out);
                 finished.Notify();
               });
  finished.WaitForNotification();
  return result;
}

void WorkerEngine::ExecuteAsync(absl::string_view program_id, std::string request_id,
                                std::vector<SliceIr> inputs, absl::Duration timeout,
                                int64_t param_version, RunDone done) {
  ExecuteAsync(program_id, std::move(request_id), std::move(inputs), timeout, param_version,
               ParamCacheMode::kOff, std::move(done));
}

void WorkerEngine::ExecuteAsync(absl::string_view program_id, std::string request_id,
                                std::vector<SliceIr> inputs, absl::Duration timeout,
                                int64_t param_version, ParamCacheMode param_cache,
                                RunDone done, std::shared_ptr<const DecodeStepIr> decode) {
  if (request_id.empty()) return done(InvalidArgument("request_id is empty"));
  const absl::Time deadline =
      absl::Now() + (timeout > absl::ZeroDuration() ? timeout : options_.default_deadline);
  std::shared_ptr<const InstalledProgram> program;
  std::shared_ptr<const LoadedModel> model;
  {
    absl::MutexLock lock(&mu_);
    auto p = programs_.find(program_id);
    if (p == programs_.end()) {
      return done(NotFound("unknown program '", program_id, "' (", programs_.size(),
                           " installed)"));
    }
    program = p->second;
    const ProgramIr& ir = program->ir;
    if (FindLocked(ir.model, ir.generation, 0) == nullptr) {
      return done(FailedPrecondition("program '", program_id, "': model '", ir.model,
                                     "' generation ", ir.generation,
                                     " is not loaded on this worker"));
    }
    model = FindLocked(ir.model, ir.generation, param_version);
    if (model == nullptr) {
      return done(NotFound("program '", program_id, "': model '", ir.model, "' generation ",
                           ir.generation, " version ", param_version,
                           " is not resident on this worker"));
    }
  }
  // A program without param-only steps runs whole in any mode.
  if (!program->param_only.any()) param_cache = ParamCacheMode::kOff;
  std::shared_ptr<const KeptBuffers> kept;
  if (param_cache == ParamCacheMode::kUse) {
    kept = model->kept_params.Find(program->cache_key);
    if (kept == nullptr) {
      return done(FailedPrecondition(
          "program '", program_id, "': nothing kept for ", model->Name(),
          " (param_cache USE before a FILL of this version on worker ", worker_id(), ")"));
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
  const bool quick =
      last_ns >= 0 && absl::Nanoseconds(last_ns) < kInlineComputeLimit;
  RunContext context{&rendezvous_, transport_, worker_id(), &timer_,
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
      outputs = AnnotateStatus(outputs.status(), "worker ", worker_id(), " program '",
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

}  // namespace meshserve
