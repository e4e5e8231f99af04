// Coordinator::InferAsync (coordinator.h): a request that holds no thread
// while its workers run. The callback of its last call to return assembles
// the answer; anything else (a failure, a long wait, a request that cannot
// start this way) continues on the shared executor through the code that
// Infer runs (coordinator_infer.cc), so both paths answer alike.
#include <memory>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "common/base/elastic_executor.h"
#include "server/coordinator/calls_in_flight.h"
#include "server/coordinator/coordinator.h"

namespace meshserve {
namespace {

// How long calls run before a thread waits for them (and watches the
// registry for a lost worker, as Infer's wait does from the start).
constexpr absl::Duration kAsyncWatchAfter = absl::Milliseconds(50);

}  // namespace

struct Coordinator::AsyncInfer {
  AsyncInfer(InferRequest r, InferDone d) : request(std::move(r)), done(std::move(d)) {}

  InferRequest request;  // `v` points into it: it stays here
  InferDone done;
  // Set by StartAsync for a request it starts.
  ValidatedRequest v;
  std::shared_ptr<const Placement> placement;
  std::shared_ptr<const CompiledPlan> plan;
  absl::Time deadline;
  std::unique_ptr<InferRecorder> recorder;
  bool admitted = false;
  PendingRun pending;
  DeadlineTimer::Id watch = 0;
  bool on_thread = false;  // a thread waited for the calls (AsyncOnThread)
};

void Coordinator::InferAsync(InferRequest request, InferDone done) {
  auto run = std::make_shared<AsyncInfer>(std::move(request), std::move(done));
  if (StartAsync(run)) return;
  metrics_.async_paths.Increment({"thread"});
  ElasticExecutor::Shared().Schedule([this, run] { run->done(Infer(run->request)); });
}

bool Coordinator::StartAsync(const std::shared_ptr<AsyncInfer>& run) {
  const InferRequest& request = run->request;
  const absl::Duration budget =
      request.timeout > absl::ZeroDuration() ? request.timeout : options_.execute_timeout;
  run->deadline = absl::Now() + budget;  // counted from arrival, as Infer counts it
  absl::StatusOr<std::shared_ptr<const ModelFile>> model = ServableModel(request.model);
  if (!model.ok()) return false;
  // A batched model goes to Infer before the request is validated (Infer
  // validates it).
  if (HasBatcher(request.model)) return false;
  absl::StatusOr<ValidatedRequest> v = ValidateInferRequest(*std::move(model), request);
  if (!v.ok()) return false;
  run->placement = CurrentPlacement(request.model);
  if (run->placement == nullptr) return false;
  run->plan = program_cache_.Find(*v, *run->placement);
  if (run->plan == nullptr) return false;
  absl::StatusOr<Batcher*> batcher = AdmitRequest(request.model, true, &run->admitted);
  if (!batcher.ok() || *batcher != nullptr) return false;
  run->v = *std::move(v);
  run->recorder = std::make_unique<InferRecorder>(&metrics_, request.model, request.id);
  absl::StatusOr<PendingRun> pending =
      StartRun(run->v, request, *run->placement, *run->plan, run->deadline, /*refill=*/false,
               run->recorder.get());
  if (!pending.ok()) {
    AsyncDone(run, pending.status());
    return true;
  }
  run->pending = *std::move(pending);
  run->watch = watch_timer_.Add(absl::Now() + kAsyncWatchAfter, [this, run] {
    if (!run->pending.calls->Claim()) return;  // settled meanwhile
    ElasticExecutor::Shared().Schedule([this, run] { AsyncOnThread(run); });
  });
  run->pending.calls->OnSettled([this, run] { AsyncSettled(run); });
  return true;
}

bool Coordinator::HasBatcher(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  return batchers_.count(model) > 0;
}

void Coordinator::AsyncSettled(const std::shared_ptr<AsyncInfer>& run) {
  watch_timer_.Remove(run->watch);
  if (!run->pending.calls->AllOk()) {
    // Cancelling the others and a retry block: not on gRPC's thread.
    ElasticExecutor::Shared().Schedule([this, run] { AsyncOnThread(run); });
    return;
  }
  // Every call returned: FinishRun collects without waiting, and only a
  // refused cache use (a failure, not this case) would run again.
  int64_t failed_worker = -1;
  absl::StatusOr<InferResponse> response =
      FinishRun(std::move(run->pending), run->v, run->request, *run->placement, *run->plan,
                run->deadline, &failed_worker, run->recorder.get());
  AsyncDone(run, std::move(response));
}

void Coordinator::AsyncOnThread(const std::shared_ptr<AsyncInfer>& run) {
  run->on_thread = true;
  AttemptResult first;
  first.placement = run->placement;
  first.response =
      FinishRun(std::move(run->pending), run->v, run->request, *run->placement, *run->plan,
                run->deadline, &first.failed_worker, run->recorder.get());
  AsyncDone(run, RunAttempts(run->v, run->request, run->deadline, run->recorder.get(),
                             std::move(first)));
}

void Coordinator::AsyncDone(const std::shared_ptr<AsyncInfer>& run,
                            absl::StatusOr<InferResponse> response) {
  // Everything of *this first: `done` may let the server stop and the
  // coordinator go.
  if (run->admitted) ReleaseInflight(run->request.model);
  run->admitted = false;
  run->recorder->Finish(response.status());
  metrics_.async_paths.Increment({run->on_thread ? "thread" : "callback"});
  InferDone done = std::move(run->done);
  done(std::move(response));
}

}  // namespace meshserve
