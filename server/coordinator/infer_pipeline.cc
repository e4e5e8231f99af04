// InferPipeline (infer_pipeline.h): the one entry (Start), a request's
// preparation and admission, the continuation of an asynchronous call (the
// last call's callback, or a thread), and the retry loop. One attempt is in
// infer_pipeline_attempt.cc.
#include "server/coordinator/infer_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/elastic_executor.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/coordinator/calls_in_flight.h"

namespace meshserve {
namespace {

// How long calls run before a thread waits for them (and watches the
// registry for a lost worker, as Infer's wait does from the start).
constexpr absl::Duration kAsyncWatchAfter = absl::Milliseconds(50);

}  // namespace

struct InferPipeline::Call {
  std::optional<InferRequest> owned;      // InferAsync's request (`request` points to it)
  const InferRequest* request = nullptr;  // `v` points into it
  InferDone done;
  bool async = false;                       // InferAsync: may hold no thread; waits on the executor
  bool may_batch = true;                    // false for a batch's own run
  std::unique_ptr<InferRecorder> recorder;  // null for a batch's own run
  // Set by Prepare.
  ValidatedRequest v;
  absl::Duration budget;
  absl::Time deadline;
  Batcher* batcher = nullptr;
  bool admitted = false;
  // Set by StartCalls for a call it starts.
  std::shared_ptr<const Placement> placement;
  std::shared_ptr<const CompiledPlan> plan;
  PendingRun pending;
  DeadlineTimer::Id watch = 0;
  bool on_thread = false;  // a thread of the executor waited for it
};

void InferPipeline::AddBatcher(const std::string& model, const BatchingConfig& config) {
  absl::MutexLock lock(&mu_);
  batchers_[model] = std::make_unique<Batcher>(
      config, [this](const InferRequest& batch) { return RunBatch(batch); });
}

void InferPipeline::InferAsync(InferRequest request, InferDone done) {
  auto call = std::make_shared<Call>();
  call->owned = std::move(request);
  call->request = &*call->owned;
  call->done = std::move(done);
  call->async = true;
  Start(call);
}

absl::StatusOr<InferResponse> InferPipeline::Infer(const InferRequest& request) {
  absl::StatusOr<InferResponse> answer;
  absl::Notification answered;
  auto call = std::make_shared<Call>();
  call->request = &request;
  call->done = [&](absl::StatusOr<InferResponse> response) {
    answer = std::move(response);
    answered.Notify();
  };
  Start(call);
  answered.WaitForNotification();
  return answer;
}

void InferPipeline::Start(const std::shared_ptr<Call>& call) {
  absl::Status prepared = Prepare(*call);
  if (!call->async) return Done(call, prepared.ok() ? RunPrepared(*call) : prepared);
  if (prepared.ok() && StartCalls(call)) return;
  call->on_thread = true;
  ElasticExecutor::Shared().Schedule(
      [this, call, prepared] { Done(call, prepared.ok() ? RunPrepared(*call) : prepared); });
}

absl::Status InferPipeline::Prepare(Call& call) {
  const InferRequest& request = *call.request;
  absl::StatusOr<std::shared_ptr<const ModelFile>> model =
      placements_->ServableModel(request.model);
  if (model.ok() && request.variant != nullptr) model = request.variant;
  if (call.may_batch) {
    // Unknown names count under model="": a series per typo would grow unbounded.
    call.recorder = std::make_unique<InferRecorder>(
        metrics_, absl::IsNotFound(model.status()) ? "" : request.model, request.id);
  }
  MS_RETURN_IF_ERROR(model.status());
  MS_ASSIGN_OR_RETURN(call.v, ValidateInferRequest(*std::move(model), request));
  if (request.variant != nullptr) {
    absl::StrAppend(&call.v.cache_key_suffix, "|", request.variant_key);
  }
  // The budget counts from arrival; retries and every worker get what is left.
  call.budget = request.timeout > absl::ZeroDuration() ? request.timeout : options_.execute_timeout;
  call.deadline = absl::Now() + call.budget;
  MS_ASSIGN_OR_RETURN(
      call.batcher,
      AdmitRequest(request.model, call.may_batch && request.decode == nullptr, &call.admitted));
  return absl::OkStatus();
}

absl::StatusOr<InferResponse> InferPipeline::RunPrepared(Call& call) {
  if (call.batcher != nullptr) return call.batcher->Infer(*call.request, call.v, call.budget);
  return RunAttempts(call.v, *call.request, call.deadline, call.recorder.get(), std::nullopt);
}

absl::StatusOr<InferResponse> InferPipeline::RunBatch(const InferRequest& batch) {
  Call call;
  call.request = &batch;
  call.may_batch = false;
  MS_RETURN_IF_ERROR(Prepare(call));
  return RunPrepared(call);
}

bool InferPipeline::StartCalls(const std::shared_ptr<Call>& call) {
  if (call->batcher != nullptr) return false;
  call->placement = placements_->CurrentPlacement(call->request->model);
  if (call->placement == nullptr) return false;
  call->plan = program_cache_->Find(call->v, *call->placement);
  if (call->plan == nullptr) return false;
  absl::StatusOr<PendingRun> pending =
      StartRun(call->v, *call->request, *call->placement, *call->plan, call->deadline,
               /*refill=*/false, call->recorder.get());
  if (!pending.ok()) {
    Done(call, pending.status());
    return true;
  }
  call->pending = *std::move(pending);
  call->watch = watch_timer_.Add(absl::Now() + kAsyncWatchAfter, [this, call] {
    if (!call->pending.calls->Claim()) return;  // settled meanwhile
    ElasticExecutor::Shared().Schedule([this, call] { WaitOnThread(call); });
  });
  call->pending.calls->OnSettled([this, call] { CallsSettled(call); });
  return true;
}

void InferPipeline::CallsSettled(const std::shared_ptr<Call>& call) {
  watch_timer_.Remove(call->watch);
  if (!call->pending.calls->AllOk()) {
    // Cancelling the others and a retry block: not on gRPC's thread.
    ElasticExecutor::Shared().Schedule([this, call] { WaitOnThread(call); });
    return;
  }
  // Every call returned: FinishRun collects without waiting, and only a
  // refused cache use (a failure, not this case) would run again.
  int64_t failed_worker = -1;
  absl::StatusOr<InferResponse> response =
      FinishRun(std::move(call->pending), call->v, *call->request, *call->placement, *call->plan,
                call->deadline, &failed_worker, call->recorder.get());
  Done(call, std::move(response));
}

void InferPipeline::WaitOnThread(const std::shared_ptr<Call>& call) {
  call->on_thread = true;
  AttemptResult first;
  first.placement = call->placement;
  first.plan = call->plan;
  first.response =
      FinishRun(std::move(call->pending), call->v, *call->request, *call->placement, *call->plan,
                call->deadline, &first.failed_worker, call->recorder.get());
  Done(call, RunAttempts(call->v, *call->request, call->deadline, call->recorder.get(),
                         std::move(first)));
}

void InferPipeline::Done(const std::shared_ptr<Call>& call,
                         absl::StatusOr<InferResponse> response) {
  // Everything of *this first: `done` may let the server stop and the
  // coordinator go.
  if (call->admitted) ReleaseInflight(call->request->model);
  call->admitted = false;
  if (call->recorder != nullptr) {
    if (response.ok() && response->batch_size > 0) {
      call->recorder->Batched(response->batch_size, response->queue_us, response->compute_us);
    }
    call->recorder->Finish(response.status());
  }
  if (call->async) metrics_->async_paths.Increment({call->on_thread ? "thread" : "callback"});
  InferDone done = std::move(call->done);
  done(std::move(response));
}

absl::StatusOr<Batcher*> InferPipeline::AdmitRequest(const std::string& model, bool may_batch,
                                                     bool* admitted) {
  *admitted = false;
  if (!may_batch) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = batchers_.find(model);
  // The batcher lives as long as *this and bounds its own queue.
  if (it != batchers_.end()) return it->second.get();
  // An unbatched model's bound: requests in flight, admitted or rejected at once.
  int64_t& inflight = inflight_[model];
  if (inflight >= options_.max_inflight_per_model) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model '", model, "' has ", inflight,
                     " requests in flight, its limit (--max_inflight_per_model=",
                     options_.max_inflight_per_model, "); retry later"));
  }
  ++inflight;
  *admitted = true;
  return nullptr;
}

void InferPipeline::ReleaseInflight(const std::string& model) {
  absl::MutexLock lock(&mu_);
  --inflight_[model];
}

absl::StatusOr<InferResponse> InferPipeline::RunAttempts(const ValidatedRequest& v,
                                                         const InferRequest& request,
                                                         absl::Time deadline,
                                                         InferRecorder* recorder,
                                                         std::optional<AttemptResult> first) {
  absl::Status last;
  // A decode step is not idempotent (it extends the workers' KV caches).
  const int attempts = request.decode != nullptr ? 1 : kMaxAttempts;
  int lost_retries = 0;  // programs installed again: not counted as attempts
  for (int attempt = 0; attempt < attempts; ++attempt) {
    AttemptResult now;
    if (attempt == 0 && first.has_value()) {
      now = *std::move(first);
      first.reset();  // a lost program's retry runs attempt 0 again
    } else {
      now.placement = placements_->CurrentPlacement(request.model);
      if (now.placement == nullptr) {
        if (!last.ok()) return last;  // a retry waited for a placement (WaitToRetry)
        return Unavailable("model '", request.model, "' is not placed yet (waiting for ",
                           options_.min_workers, " workers)");
      }
      absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan =
          program_cache_->GetOrCompile(v, now.placement);
      if (plan.ok()) now.plan = *plan;
      now.response = plan.ok() ? RunOnce(v, request, *now.placement, **plan, deadline,
                                         &now.failed_worker, recorder)
                               : plan.status();
    }
    const bool lost_program = !now.response.ok() && now.plan != nullptr &&
                              absl::IsNotFound(now.response.status()) &&
                              absl::StrContains(now.response.status().message(),
                                                "unknown program '" + now.plan->program_id);
    // The next attempt (or request) installs it again.
    if (lost_program) program_cache_->Forget(*now.plan);
    const bool reinstall = lost_program && request.decode == nullptr &&
                           lost_retries < kMaxLostProgramRetries;
    if (now.response.ok() || (attempt == attempts - 1 && !reinstall)) {
      return std::move(now.response);
    }
    last = now.response.status();
    if (reinstall) {
      MS_LOG(INFO) << "retrying request on model '" << request.model << "' (installing its "
                   << "program again) after: " << last;
      ++lost_retries;
      --attempt;
      continue;
    }
    if (!WaitToRetry(request.model, now, deadline)) return std::move(now.response);
  }
  return last;
}

bool InferPipeline::WaitToRetry(const std::string& model, const AttemptResult& now,
                                absl::Time deadline) {
  const Placement& old = *now.placement;
  auto moved = [&] {
    std::shared_ptr<const Placement> current = placements_->CurrentPlacement(model);
    return current != nullptr &&
           (current->generation != old.generation || current->version != old.version);
  };
  if (!RetriableFailure(now.response.status(), moved())) return false;
  // Inference is idempotent: retry on the new generation if the model moves
  // soon (the control loop probes a suspect and re-places without it), or on
  // the same one once the failed worker and every worker of the placement
  // are alive and not suspect (a transient failure, e.g. a worker that joined
  // in this generation and timed out dialling a peer, or a peer's
  // cancellation whose cause was transient). Give up when nothing moved and
  // some worker is still suspect within retry_wait or the deadline.
  auto usable = [&] {
    if (now.failed_worker < 0) return false;  // not a worker's failure: wait for a move
    for (const auto& [id, address] : old.worker_addresses) {
      if (!registry_->IsAlive(id) || registry_->IsSuspect(id)) return false;
    }
    return registry_->IsAlive(now.failed_worker) && !registry_->IsSuspect(now.failed_worker);
  };
  const absl::Time give_up = std::min(absl::Now() + options_.retry_wait, deadline);
  while (absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    const bool is_moved = moved();
    if (is_moved || usable()) {
      MS_LOG(INFO) << "retrying request on model '" << model << "' ("
                   << (is_moved ? "new generation or version" : "workers alive")
                   << ") after worker " << now.failed_worker
                   << " failed: " << now.response.status();
      return true;
    }
  }
  return false;
}

bool RetriableFailure(const absl::Status& failure, bool placement_moved) {
  if (absl::IsUnavailable(failure) || absl::IsAborted(failure)) return true;
  return placement_moved && (absl::IsNotFound(failure) || absl::IsFailedPrecondition(failure) ||
                             absl::IsCancelled(failure));
}

}  // namespace meshserve
