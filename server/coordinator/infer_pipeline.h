// InferPipeline: the coordinator's requests, from arrival to the answer
// (README.md has a request's path). It has one entry, InferAsync; Infer is
// InferAsync answered on the caller's thread.
//
// A request is prepared once: its model found (ServableModel, or the
// request's variant), the request validated against it (names, dtypes,
// shapes, byte lengths, out_sharding specs; infer_request.h), its deadline
// set (its timeout, else options.execute_timeout, counted from arrival) and
// it is admitted: a model with a "batching" key queues it in its Batcher
// (batcher.h), which runs each batch through the attempts below as one
// request; an unbatched model has at most options.max_inflight_per_model
// requests in flight (one more gets RESOURCE_EXHAUSTED naming the model and
// the limit).
//
// An attempt finds or compiles the program for (model, input shapes,
// out_shardings, generation) (program_cache.h; installed on its workers
// once), cuts each input into the slices the plan asks for (one Execute per
// worker carrying all of its slices; infer_calls.h), runs Execute on all
// workers at once and assembles each output from one replica per box. A
// worker failure (IsWorkerFailure, fan_out.h: UNAVAILABLE, DEADLINE_EXCEEDED,
// CANCELLED) fails the attempt with UNAVAILABLE naming the worker; the other
// workers get Cancel, the worker is marked suspect (the control step probes
// it and marks it dead when the probe fails), and the request is retried
// (inference is idempotent; up to kMaxAttempts within its deadline): on the
// new generation or version if the model moves within options.retry_wait,
// or on the same one once the failed worker and every worker of the
// placement are alive and not suspect (a transient failure). Retried too
// (RetriableFailure): a worker's ABORTED (its run cancelled because a peer
// failed: its send to the dead peer, or the peer's Cancel, reached the
// coordinator before the peer's own failure did), and NOT_FOUND,
// FAILED_PRECONDITION or CANCELLED from a placement the model has left (its
// generation or version unloaded under the request). Never retried: the
// request's own errors (bad input, RESOURCE_EXHAUSTED, its deadline). Each
// attempt runs on one placement (one generation and version), so no answer
// mixes two, and a retry takes the current one, never an older one. A
// worker that answers NOT_FOUND "unknown program" lost the plan's program
// (e.g. the uninstall of an evicted plan of the same id came after it was
// installed again): the cache forgets the plan and the request is retried at
// once, installing it again (up to 3 times, besides the other retries). The
// last attempt's error is final. A call in flight
// on a worker the registry declares dead or suspect is given up at once (its
// peers are cancelled, the request retried) rather than awaited until its
// deadline. Each worker gets the time left (ExecuteCall.deadline_ms), and a
// worker's DEADLINE_EXCEEDED at the deadline is the request's own (not a
// worker failure, not retried).
//
// InferAsync: an unbatched request whose plan is compiled holds no thread
// while its workers run: the callback of the last call to return assembles
// the answer. A call that fails, or calls that run longer than the watch
// period, continue on a thread of the shared executor (cancel, abandon a lost
// worker, retry); every other request (a batched model, a plan to compile,
// an error before the calls) continues there from its preparation.
// Infer runs everything on its caller's thread.
//
// Definitions: infer_pipeline.cc (the entry, preparation, admission, the
// asynchronous continuation, retries) and infer_pipeline_attempt.cc (one
// attempt: StartRun, FinishRun, CollectCalls).
//
// Thread-safety: thread-safe. mu_ (batchers, requests in flight) is a leaf
// lock, never held during an RPC.
#ifndef MESHSERVE_SERVER_COORDINATOR_INFER_PIPELINE_H_
#define MESHSERVE_SERVER_COORDINATOR_INFER_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/deadline_timer.h"
#include "common/model/batching_config.h"
#include "server/coordinator/batcher.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/params/param_cache_state.h"
#include "server/coordinator/placement_manager.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_connections.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class CallsInFlight;  // calls_in_flight.h

class InferPipeline {
 public:
  using InferDone = std::function<void(absl::StatusOr<InferResponse>)>;

  // Every pointer must outlive this.
  InferPipeline(const CoordinatorOptions& options, PlacementManager* placements,
                WorkerRegistry* registry, WorkerConnections* connections,
                ProgramCache* program_cache, ParamCacheState* param_cache,
                CoordinatorMetrics* metrics)
      : options_(options),
        placements_(placements),
        registry_(registry),
        connections_(connections),
        program_cache_(program_cache),
        param_cache_(param_cache),
        metrics_(metrics) {}
  InferPipeline(const InferPipeline&) = delete;
  InferPipeline& operator=(const InferPipeline&) = delete;

  // `model` queues its requests in a Batcher with `config` (before requests).
  void AddBatcher(const std::string& model, const BatchingConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Answers `request` through `done` (exactly once, on any thread; it must
  // not block). See the file comment.
  void InferAsync(InferRequest request, InferDone done);
  // InferAsync, run on the caller's thread until the answer.
  absl::StatusOr<InferResponse> Infer(const InferRequest& request);

 private:
  static constexpr int kMaxLostProgramRetries = 3;
  // Attempts of an idempotent request (each retry after WaitToRetry).
  static constexpr int kMaxAttempts = 8;
  struct Call;  // one request, from arrival to its answer (infer_pipeline.cc)
  // What one attempt of a request made.
  struct AttemptResult {
    std::shared_ptr<const Placement> placement;
    absl::StatusOr<InferResponse> response;
    int64_t failed_worker = -1;  // a worker whose failure failed it
    std::shared_ptr<const CompiledPlan> plan;  // the plan it ran, if any
  };
  // An attempt whose calls run (StartRun) until FinishRun collects them.
  struct PendingRun {
    std::string request_id;
    ParamCacheMode param_cache = ParamCacheMode::kOff;
    int64_t bytes_in = 0;
    absl::Time compute_start;
    std::vector<int64_t> ids;  // ids[i]: the worker of call i
    std::shared_ptr<CallsInFlight> calls;
  };

  // The one entry: prepares `call`, then starts its calls without a thread
  // (an asynchronous call with a compiled plan), or runs the rest on the
  // caller's thread (Infer) or the shared executor.
  void Start(const std::shared_ptr<Call>& call);
  // Finds the model, validates, sets the deadline, admits (file comment).
  absl::Status Prepare(Call& call) ABSL_LOCKS_EXCLUDED(mu_);
  // The rest of a prepared request that waits on its thread: its batcher, or
  // the attempts.
  absl::StatusOr<InferResponse> RunPrepared(Call& call);
  // One batch of a batcher (a request of its own, not admitted or recorded).
  absl::StatusOr<InferResponse> RunBatch(const InferRequest& batch);
  // The calls of an asynchronous call started (true), or false when its
  // model is batched, not placed, or its plan is not compiled.
  bool StartCalls(const std::shared_ptr<Call>& call);
  // StartCalls' continuations: every call returned; or a thread waits.
  void CallsSettled(const std::shared_ptr<Call>& call);
  void WaitOnThread(const std::shared_ptr<Call>& call);
  // Ends admission and recording, and answers.
  void Done(const std::shared_ptr<Call>& call, absl::StatusOr<InferResponse> response);
  // The model's batcher (may_batch and it has one), or else null after
  // admitting the request under options.max_inflight_per_model (*admitted
  // then; ReleaseInflight ends it). \error kResourceExhausted at the bound.
  absl::StatusOr<Batcher*> AdmitRequest(const std::string& model, bool may_batch,
                                        bool* admitted) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseInflight(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);
  // The attempts of an admitted request: up to kMaxAttempts (one for a
  // decode step, which is not idempotent), each retry after a retriable
  // failure (RetriableFailure) once WaitToRetry says it may succeed; and at
  // once, up to kMaxLostProgramRetries times and not counted as an
  // attempt, after a worker lost the plan's program (NOT_FOUND "unknown
  // program": an uninstall of the evicted plan of the same id raced its
  // install again; the plan is forgotten, so the retry installs it again).
  // Every attempt runs on one placement (one generation, one version), so an
  // answer is never mixed; a retry runs on the current one, never older.
  // `first`: the first attempt, already run (an asynchronous call's).
  absl::StatusOr<InferResponse> RunAttempts(const ValidatedRequest& v,
                                            const InferRequest& request, absl::Time deadline,
                                            InferRecorder* recorder,
                                            std::optional<AttemptResult> first);
  // After `now` failed: whether to retry, having waited (at most
  // options.retry_wait, never past `deadline`) until the model moved to a new
  // generation or version, or `now`'s failed worker and every worker of its
  // placement are alive and not suspect. False at once for a failure that is
  // not retriable.
  bool WaitToRetry(const std::string& model, const AttemptResult& now, absl::Time deadline);

  // infer_pipeline_attempt.cc. One attempt: StartRun, then FinishRun. Sets
  // *failed_worker to a worker whose failure failed it. `deadline`: the
  // request's. `refill`: a kUse of this request was refused
  // (param_cache_state.h); this run fills, whatever the state says, so that
  // it cannot be refused again.
  absl::StatusOr<InferResponse> RunOnce(const ValidatedRequest& v, const InferRequest& request,
                                        const Placement& placement, const CompiledPlan& plan,
                                        absl::Time deadline, int64_t* failed_worker,
                                        InferRecorder* recorder, bool refill = false);
  // Cuts the request's calls (BuildCalls) and starts them on every worker at
  // once.
  absl::StatusOr<PendingRun> StartRun(const ValidatedRequest& v, const InferRequest& request,
                                      const Placement& placement, const CompiledPlan& plan,
                                      absl::Time deadline, bool refill, InferRecorder* recorder);
  // Collects the calls (CollectCalls), reruns a refused param-cache use as a
  // fill, and assembles the outputs. Does not block when the calls all
  // returned without error (CallsInFlight::AllOk).
  absl::StatusOr<InferResponse> FinishRun(PendingRun run, const ValidatedRequest& v,
                                          const InferRequest& request,
                                          const Placement& placement, const CompiledPlan& plan,
                                          absl::Time deadline, int64_t* failed_worker,
                                          InferRecorder* recorder);
  // Waits for the calls: the first failure cancels the others, and a call on
  // a worker the registry declares dead or suspect is abandoned at once.
  absl::StatusOr<std::map<int64_t, ExecuteResult>> CollectCalls(const Placement& placement,
                                                                const PendingRun& run,
                                                                absl::Time deadline,
                                                                int64_t* failed_worker);
  void CancelOthers(const Placement& placement, const std::vector<int64_t>& worker_ids,
                    int64_t failed, const std::string& request_id);
  std::string NextRequestId(const std::string& client_id);

  const CoordinatorOptions& options_;
  PlacementManager* const placements_;
  WorkerRegistry* const registry_;
  WorkerConnections* const connections_;
  ProgramCache* const program_cache_;
  ParamCacheState* const param_cache_;
  CoordinatorMetrics* const metrics_;

  absl::Mutex mu_;
  // Requests in flight per unbatched model (options_.max_inflight_per_model).
  std::map<std::string, int64_t> inflight_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> next_request_ = 0;
  // Looks at asynchronous calls still waiting after the watch period.
  DeadlineTimer watch_timer_;
  // One per model with a "batching" key (batcher.h). Last: they go first (a
  // batch in flight runs through the members above).
  std::map<std::string, std::unique_ptr<Batcher>> batchers_ ABSL_GUARDED_BY(mu_);
};

// Whether a failed attempt may be retried (InferPipeline's file comment):
// UNAVAILABLE and ABORTED always; NOT_FOUND, FAILED_PRECONDITION and
// CANCELLED when the model has moved off the attempt's placement
// (`placement_moved`: a new generation or version). Nothing else.
bool RetriableFailure(const absl::Status& failure, bool placement_moved);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_INFER_PIPELINE_H_
