// The coordinator's transport-free core: model repository, membership,
// placement with generations, the compiled-program cache, and request
// execution over abstract WorkerClients (../shared/design/architecture.md).
//
// Models. Create() loads every *.json file of options.model_dir. Each model
// stands alone: a malformed file or a model JAX would reject (ModelCompiler::
// ValidateModel) is kept with its error (Status lists it; Infer answers
// FAILED_PRECONDITION with that error) and the others are served.
//
// Membership, placement and parameters. Workers Register and Heartbeat
// (worker_registry.h); the control loop (Tick(), run every
// heartbeat_interval/2 by a thread owned here) keeps each model placed on the
// live workers, with a new generation whenever they change
// (PlacementManager, placement_manager.h). Pushes and pulls of a model's
// parameters are ParamVersions' (param_versions.h).
//
// Requests. A model with a "batching" key queues its requests in its Batcher
// (batcher.h), which runs each batch through the path below as one request.
// Infer validates the request against the model (names, dtypes,
// shapes, byte lengths, out_sharding specs), finds or compiles the program for
// (model, input shapes, out_shardings, generation) (installed on its workers
// once), cuts each input into the slices the plan asks for (one Execute per
// worker carrying all of its slices), runs Execute on all workers in parallel
// and assembles each output from one replica per box. A worker failure
// (IsWorkerFailure, fan_out.h: UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED)
// fails the attempt with UNAVAILABLE naming the worker; the other workers get
// Cancel, the worker is marked suspect (the control loop probes it and marks
// it dead when the probe fails), and the request is retried once (inference
// is idempotent): on the new generation if the model moves within
// options.retry_wait, or on the same one if the probe finds the worker alive
// (a transient failure). The retry's error is final. A call in flight on a
// worker the registry declares dead or suspect is given up at once (its peers
// are cancelled, the request retried) rather than awaited until its deadline.
// Deadlines: a request's budget (its timeout, else options.execute_timeout)
// counts from arrival; each worker gets the time left (ExecuteCall.deadline_ms)
// and a worker's DEADLINE_EXCEEDED at the deadline is the request's own (not a
// worker failure, not retried). Admission: an unbatched model has at most
// options.max_inflight_per_model requests in flight; one more gets
// RESOURCE_EXHAUSTED naming the model and the limit (a batched model's bound
// is its batcher's queue). At most options.max_concurrent_pushes pushes stage
// at once over all models (one more: RESOURCE_EXHAUSTED naming the limit; a
// second push to the same model: ABORTED). Scale steps need no cap: the
// control loop places one model at a time under control_mu_, so at most one
// scale step runs at any time, beside at most max_concurrent_pushes pushes
// (whose commits also take control_mu_).
//
// The parts: request types and validation (infer_request.h), the program
// cache (program_cache.h), fan-out and the worker-failure rule (fan_out.h),
// placement (placement.h), membership (worker_registry.h), the worker clients
// (worker_connections.h), the models and their placements
// (placement_manager.h), parameter versions (param_versions.h). This file's
// definitions are in coordinator.cc (creation, models, control loop, views)
// and coordinator_infer.cc (Infer), coordinator_infer_async.cc (InferAsync).
// README.md has a request's path.
//
// Thread-safety: all public methods are thread-safe. Locks, in acquisition
// order: PlacementManager's (placement_manager.h) -> mu_ (batchers, requests
// in flight) -> the program cache's locks (program_cache.h) -> the
// connections' lock (worker_connections.h). No lock is held during an RPC
// except the placement manager's control lock and a cache entry's own mutex
// while its program is compiled and installed.
#ifndef MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_
#define MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/deadline_timer.h"
#include "common/model/model_file.h"
#include "server/compiler/model_compiler.h"
#include "server/coordinator/batcher.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/param_cache_state.h"
#include "server/coordinator/param_versions.h"
#include "server/coordinator/placement_manager.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_connections.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class CallsInFlight;  // calls_in_flight.h

struct WorkerView {
  WorkerInfo info;
  absl::StatusOr<WorkerStatusIr> status = absl::UnknownError("not asked");
  struct Hosted {
    std::string model;
    int64_t generation = 0;
    std::vector<int64_t> devices;
    std::vector<std::string> coords;
    int64_t version = 0;
    std::vector<int64_t> replica_devices;
  };
  std::vector<Hosted> placements;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options, WorkerClientFactory client_factory,
      std::unique_ptr<ModelCompiler> compiler);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Membership (MembershipService).
  absl::StatusOr<int64_t> RegisterWorker(const std::string& address, int32_t cores,
                                         int64_t memory_bytes, int64_t previous_worker_id);
  bool Heartbeat(int64_t worker_id, bool draining);

  // One control step: expire dead workers, probe suspects, place models whose
  // workers changed, unload retired generations no request holds.
  void Tick();

  absl::StatusOr<InferResponse> Infer(const InferRequest& request);
  // Infer, answered through `done` (exactly once, on any thread; it must not
  // block). An unbatched request whose plan is compiled holds no thread while
  // its workers run: the callback of the last call to return assembles the
  // answer and runs `done`. A call that fails, or calls that run longer than
  // the watch period, continue on a thread of the shared executor, as Infer
  // would (cancel, abandon a lost worker, retry); every other request (a
  // batched model, a plan to compile, an error before the calls) runs Infer
  // there.
  using InferDone = std::function<void(absl::StatusOr<InferResponse>)>;
  void InferAsync(InferRequest request, InferDone done);

  // Every model that loaded is placed, on live workers only.
  bool IsReady() const;
  std::vector<ModelStatus> ModelStatuses() const;
  // \error kNotFound for an unknown model.
  absl::StatusOr<ModelStatus> GetModelStatus(const std::string& name) const;
  // \error kNotFound (unknown model), kFailedPrecondition (model with an
  // error), kUnavailable (not placed yet).
  absl::StatusOr<DescribeResult> Describe(const std::string& model,
                                          const InputShapes& input_shapes);
  // Registry view plus each live worker's Status RPC (asked in parallel).
  std::vector<WorkerView> Workers();

  // Parameters: ParamVersions::BeginPush and PullParams (param_versions.h).
  absl::StatusOr<std::unique_ptr<ParamPush>> BeginPush(const std::string& model);
  absl::Status PullParams(const std::string& model, const std::vector<std::string>& params,
                          const std::function<absl::Status(PullChunk)>& sink);

  const CoordinatorOptions& options() const { return options_; }
  WorkerRegistry& registry() { return registry_; }
  CoordinatorMetrics& metrics() { return metrics_; }

 private:
  Coordinator(CoordinatorOptions options, WorkerClientFactory factory,
              std::unique_ptr<ModelCompiler> compiler);
  void LoadModelDir();
  void ControlLoop();
  // The control thread's next tick runs now (a push ended: its retired
  // version can be unloaded at once, its buffers reused by the next push).
  void WakeControl();
  absl::StatusOr<std::shared_ptr<WorkerClient>> Client(int64_t worker_id,
                                                       const std::string& address) {
    return connections_.Get(worker_id, address);
  }
  // The model of a loaded, servable model.
  // \error kNotFound (unknown), kFailedPrecondition (its load error).
  absl::StatusOr<std::shared_ptr<const ModelFile>> ServableModel(const std::string& name) const {
    return placements_.ServableModel(name);
  }
  // Infer of `model` (ServableModel of request.model), recorded by
  // `recorder` (null for the batcher's own runs of a batch: its requests are
  // recorded one by one); through the model's batcher when it has one and
  // may_batch (the batcher's runs pass false).
  absl::StatusOr<InferResponse> InferOne(const InferRequest& request,
                                         std::shared_ptr<const ModelFile> model, bool may_batch,
                                         InferRecorder* recorder);
  struct AsyncInfer;  // one InferAsync request (coordinator_infer_async.cc)
  // InferAsync's parts (coordinator_infer_async.cc). StartAsync starts the
  // calls of `run` and returns true, or false when the request must run
  // Infer on a thread.
  bool StartAsync(const std::shared_ptr<AsyncInfer>& run);
  void AsyncSettled(const std::shared_ptr<AsyncInfer>& run);
  bool HasBatcher(const std::string& model) const ABSL_LOCKS_EXCLUDED(mu_);
  void AsyncOnThread(const std::shared_ptr<AsyncInfer>& run);
  void AsyncDone(const std::shared_ptr<AsyncInfer>& run, absl::StatusOr<InferResponse> response);
  // The model's batcher (may_batch and it has one), or else null after
  // admitting the request under options.max_inflight_per_model (*admitted
  // then; ReleaseInflight ends it). \error kResourceExhausted at the bound.
  absl::StatusOr<Batcher*> AdmitRequest(const std::string& model, bool may_batch,
                                        bool* admitted) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseInflight(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);
  // What one attempt of a request made.
  struct AttemptResult {
    std::shared_ptr<const Placement> placement;
    absl::StatusOr<InferResponse> response;
    int64_t failed_worker = -1;  // a worker whose failure failed it
  };
  // The attempts of an admitted request: one, and a second after a worker
  // failed (kUnavailable) once the model moved or the worker proved alive.
  // `first`: the first attempt, already run (InferAsync's).
  absl::StatusOr<InferResponse> RunAttempts(const ValidatedRequest& v,
                                            const InferRequest& request, absl::Time deadline,
                                            InferRecorder* recorder,
                                            std::optional<AttemptResult> first);
  // An attempt whose calls run (StartRun) until FinishRun collects them.
  struct PendingRun {
    std::string request_id;
    ParamCacheMode param_cache = ParamCacheMode::kOff;
    int64_t bytes_in = 0;
    absl::Time compute_start;
    std::vector<int64_t> ids;  // ids[i]: the worker of call i
    std::shared_ptr<CallsInFlight> calls;
  };
  // One attempt of Infer: StartRun, then FinishRun. Sets *failed_worker to a
  // worker whose failure failed it. `deadline`: the request's (its budget
  // counted from its arrival). `refill`: a kUse of this request was refused
  // (param_cache_state.h); this run fills, whatever the state says, so that
  // it cannot be refused again.
  absl::StatusOr<InferResponse> RunOnce(const ValidatedRequest& v, const InferRequest& request,
                                        const Placement& placement,
                                        const CompiledPlan& plan, absl::Time deadline,
                                        int64_t* failed_worker, InferRecorder* recorder,
                                        bool refill = false);
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
  std::shared_ptr<const Placement> CurrentPlacement(const std::string& model) const {
    return placements_.CurrentPlacement(model);
  }
  std::string NextRequestId(const std::string& client_id);

  const CoordinatorOptions options_;
  const std::unique_ptr<ModelCompiler> compiler_;
  WorkerRegistry registry_;

  mutable absl::Mutex mu_;
  // One per model with a "batching" key (batcher.h); made by LoadModelDir.
  std::map<std::string, std::unique_ptr<Batcher>> batchers_ ABSL_GUARDED_BY(mu_);
  // Requests in flight per unbatched model (options_.max_inflight_per_model).
  std::map<std::string, int64_t> inflight_ ABSL_GUARDED_BY(mu_);

  WorkerConnections connections_;
  ProgramCache program_cache_;
  CoordinatorMetrics metrics_;
  ParamCacheState param_cache_;  // counts into metrics_
  PlacementManager placements_;
  ParamVersions params_;

  std::atomic<int64_t> next_request_ = 0;
  // Looks at InferAsync's requests still waiting after the watch period.
  DeadlineTimer watch_timer_;
  absl::Notification stop_;
  // Set by WakeControl: the control loop ticks now instead of at its period.
  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread control_thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_
