// The coordinator's transport-free core: model repository, membership,
// placement with generations, the compiled-program cache, and request
// execution over abstract WorkerClients (../shared/design/architecture.md).
//
// Models. Create() loads every *.json file of options.model_dir. Each model
// stands alone: a malformed file or a model JAX would reject (ModelCompiler::
// ValidateModel) is kept with its error (Status lists it; Infer answers
// FAILED_PRECONDITION with that error) and the others are served.
//
// Membership and placement. Workers Register and Heartbeat (worker_registry.h).
// The control loop (Tick(), run every heartbeat_interval/2 by a thread owned
// here) expires dead workers, probes suspects (workers a call failed on, or
// whose connection dropped: a killed process is found within a tick, not
// after its missed heartbeats), and whenever the set of live,
// non-draining workers differs from a model's placement computes a new
// placement (placement.h) with a new generation, loads it on every worker
// (LoadModel, in parallel), and only then switches the model to it. A request
// pins the placement it started on (shared_ptr), so requests in flight finish
// on the old generation and no answer mixes generations; a retired placement
// is unloaded (UnloadModel) once no request holds it.
//
// Parameters are state (param_moves.h, param_push.h). A placement carries a
// parameter version (1 at load) and, with options.replicas = 1, replica
// devices (placement.h). A scale step loads the new placement with sources
// from the old one's live holders (draining workers included), keeping the
// version, and records a ScaleStep. PushParams (BeginPush) stages a new
// version on the current placement's workers and switches to a new Placement
// of the same generation and version + 1; PullParams reads the current
// version. On its first placement of a model this coordinator asks the live
// workers what they hold: a complete placement on exactly the workers it
// would use is adopted as is; otherwise their newest version is the source of
// the new placement (a restarted coordinator re-initialises nothing a live
// worker still holds). After a restart the workers come back one by one (each
// at its next heartbeat): while a returning worker (one that registered with
// the id it had) is among the live ones, first placements wait until no
// worker has registered for options.rejoin_quiet (at most 5 times that after
// this coordinator started), so a model is not first placed on the one or two
// workers back so far, re-initialising what the others still hold.
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
// placement (placement.h), membership (worker_registry.h). This file's
// definitions are in coordinator.cc (creation, models, control loop, views)
// and coordinator_infer.cc (Infer), coordinator_infer_async.cc (InferAsync).
// README.md has a request's path.
//
// Thread-safety: all public methods are thread-safe. Locks, in acquisition
// order: control_mu_ (one control step, or a push's commit and switch, at a
// time) -> mu_ (models, placements)
// -> the program cache's locks (program_cache.h) -> clients_mu_ (worker
// clients). No lock is held during an RPC except control_mu_ (only the control
// loop takes it) and a cache entry's own mutex while its program is compiled
// and installed.
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
#include "server/coordinator/param_cache_state.h"
#include "server/coordinator/param_moves.h"
#include "server/coordinator/param_push.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class CallsInFlight;  // calls_in_flight.h

struct CoordinatorOptions {
  std::string model_dir;
  int min_workers = 1;  // a model's first placement waits for this many live workers
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  int missed_beats = 3;
  // While a returning worker is live, first placements wait until no worker
  // has registered for this long (at most 5 times it after the start); zero:
  // no wait. meshserve-coordinator sets one heartbeat interval.
  absl::Duration rejoin_quiet = absl::ZeroDuration();
  // A dead worker that no placement uses is forgotten this long after its
  // last beat (status stops listing it).
  absl::Duration forget_dead_after = absl::Seconds(30);
  absl::Duration load_timeout = absl::Seconds(300);
  absl::Duration install_timeout = absl::Seconds(30);
  absl::Duration execute_timeout = absl::Seconds(120);  // default per request
  absl::Duration control_timeout = absl::Seconds(2);    // probes, cancel, unload
  absl::Duration retry_wait = absl::Seconds(4);
  absl::Duration placement_retry_backoff = absl::Seconds(1);
  // Requests of one unbatched model admitted at once; one more: RESOURCE_EXHAUSTED.
  int max_inflight_per_model = 64;
  // Parameter pushes staging at once over all models; one more: RESOURCE_EXHAUSTED.
  int max_concurrent_pushes = 2;
  bool run_control_thread = true;  // tests may call Tick() themselves
  int replicas = 1;  // 0 or 1: copies of every param box beyond the placement
  // The most bytes any one worker keeps, over all plans, of what plans'
  // param-only steps make (e.g. a gathered kernel), kept with its param
  // version; 0: never keep, run those steps on every request
  // (param_cache_state.h).
  int64_t param_cache_bytes = int64_t{64} << 20;
  // A worker's call whose input and output slices are at most this many
  // bytes is ExecuteCall::small (it may share a long-lived stream with
  // others); 0: every call is a call of its own.
  int64_t small_call_bytes = int64_t{64} << 10;
};

// One placement change of a model (a scale step), in the status.
struct ScaleStep {
  int64_t generation = 0;
  int64_t workers = 0;
  double seconds = 0;  // load of the new placement until the switch
  ParamMoveStats stats;
};

struct ModelStatus {
  std::string name;
  std::string file;
  std::string state;  // "ready", "waiting for workers (1/2)", "error: ..."
  bool ready = false;
  absl::Status error;  // the load error of a model that cannot be served
  std::string mesh;
  int64_t generation = 0;
  int64_t version = 0;  // parameter version served (0: not placed)
  int replicas = 0;
  std::vector<ScaleStep> scale_steps;  // newest last, bounded
  std::shared_ptr<const ModelFile> model;  // null when the file did not parse
  std::shared_ptr<const Placement> placement;
};

// A pulled param's bytes (PullParams): the first chunk of a param sets shape,
// dtype, total_bytes and version.
struct PullChunk {
  std::string param;
  std::vector<int64_t> shape;
  int dtype = 0;  // tensor.proto DTypeProto
  int64_t total_bytes = 0;
  int64_t byte_offset = 0;
  std::string data;
  int64_t version = 0;
};

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

  // Parameters (coordinator_params.cc). BeginPush starts a push to `model`
  // (param_push.h); the ParamPush commits at Finish and aborts when dropped.
  // \error kNotFound (unknown model), kFailedPrecondition (model with an
  //   error), kUnavailable (not placed), kAborted (a push to it is in progress),
  //   kResourceExhausted (options.max_concurrent_pushes pushes in progress).
  absl::StatusOr<std::unique_ptr<ParamPush>> BeginPush(const std::string& model);
  // Streams `params` (empty: every param, in the model's order) of the current
  // version to `sink` in ~1 MiB chunks, each param assembled from one live
  // holder per distinct box (ReadParam). A sink error stops the pull.
  // \error as BeginPush; kNotFound for an unknown param.
  absl::Status PullParams(const std::string& model, const std::vector<std::string>& params,
                          const std::function<absl::Status(PullChunk)>& sink);

  const CoordinatorOptions& options() const { return options_; }
  WorkerRegistry& registry() { return registry_; }
  CoordinatorMetrics& metrics() { return metrics_; }

 private:
  struct ModelEntry {
    std::string file;
    std::shared_ptr<const ModelFile> model;  // null when parsing failed
    absl::Status error;                      // not servable when non-OK
    std::shared_ptr<const Placement> placement;
    absl::Time placed_at = absl::InfinitePast();
    absl::Status placement_error;
    absl::Time next_attempt = absl::InfinitePast();
    bool pushed = false;           // a push committed: no seed/checkpoint fallback
    bool push_in_progress = false;
    bool asked_workers = false;    // the first placement asked workers' holdings
    std::vector<ScaleStep> scale_steps;
  };
  // What live workers report holding of a model (coordinator restart).
  struct WorkerHoldings {
    std::optional<Placement> adoptable;  // complete, on exactly the planned workers
    std::vector<ParamHolding> newest;    // every holding of the newest version
    int64_t version = 1;
    int64_t max_generation = 0;
  };

  Coordinator(CoordinatorOptions options, WorkerClientFactory factory,
              std::unique_ptr<ModelCompiler> compiler);
  void LoadModelDir();
  void ControlLoop();
  // The control thread's next tick runs now (a push ended: its retired
  // version can be unloaded at once, its buffers reused by the next push).
  void WakeControl();
  // Marks suspect every worker whose connection dropped (ConnectionDropped).
  void WatchConnections();
  void ProbeSuspects();
  void PlaceModels() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // True while returning workers may still be re-registering (see above).
  bool AwaitingReturningWorkers(absl::Time now) const;
  void PlaceModel(const std::string& name, const ModelFile& model,
                  const std::vector<WorkerInfo>& live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Loads `placement` with `sources` (PlanParamMoves) on its workers in
  // parallel; sums what they report into *result.
  absl::Status LoadPlacement(const ModelFile& model, const Placement& placement,
                             const std::map<int64_t, std::vector<ParamPieceIr>>& sources,
                             LoadModelResultIr* result);
  // coordinator_place.cc: the old holdings of a scale step from `current`
  // (live workers; one that re-registered since `placed_at` only if its Status
  // still lists the placement).
  std::vector<ParamHolding> CurrentHoldings(const Placement& current, absl::Time placed_at);
  bool StillHolds(int64_t worker_id, const Placement& placement);
  WorkerHoldings AskHoldings(const std::string& model, const Placement& planned);
  // The first placement of `name` after start: adopts what the workers hold
  // (true) or sets the old holdings, version and pushed flag from it (false).
  bool AdoptOrAsk(const std::string& name, const Placement& planned,
                  std::vector<ParamHolding>* old, int64_t* version, bool* pushed);
  // After LoadPlacement of `next`: switches to it (recording the step) or
  // records the failure.
  void FinishLoad(const std::string& name, Placement next, const ParamMoveStats& planned,
                  const LoadModelResultIr& result, const absl::Status& loaded, double seconds)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records the step and switches the model to `next` (mu_ held).
  void SwitchTo(ModelEntry& entry, const std::string& name, Placement next, ScaleStep step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The push's commit and switch, under control_mu_ (coordinator_params.cc).
  absl::Status CommitPush(const std::string& model,
                          const std::shared_ptr<const Placement>& at,
                          const std::function<absl::Status()>& commit)
      ABSL_LOCKS_EXCLUDED(control_mu_, mu_);
  void UnloadRetired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Forgets dead workers that no placement (current or retired) uses.
  void ForgetDeparted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  absl::StatusOr<std::shared_ptr<WorkerClient>> Client(int64_t worker_id,
                                                       const std::string& address);
  // The model of a loaded, servable model.
  // \error kNotFound (unknown), kFailedPrecondition (its load error).
  absl::StatusOr<std::shared_ptr<const ModelFile>> ServableModel(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
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
  std::shared_ptr<const Placement> CurrentPlacement(const std::string& model) const;
  std::string NextRequestId(const std::string& client_id);

  const CoordinatorOptions options_;
  const WorkerClientFactory client_factory_;
  const std::unique_ptr<ModelCompiler> compiler_;
  WorkerRegistry registry_;

  absl::Mutex control_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(clients_mu_);
  std::map<std::string, ModelEntry> models_ ABSL_GUARDED_BY(mu_);
  // One per model with a "batching" key (batcher.h); made by LoadModelDir.
  std::map<std::string, std::unique_ptr<Batcher>> batchers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const Placement>> retired_ ABSL_GUARDED_BY(mu_);
  // Requests in flight per unbatched model (options_.max_inflight_per_model).
  std::map<std::string, int64_t> inflight_ ABSL_GUARDED_BY(mu_);
  int64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  // Pushes begun and not yet committed or aborted (options_.max_concurrent_pushes).
  int pushes_in_progress_ ABSL_GUARDED_BY(mu_) = 0;

  ProgramCache program_cache_;
  CoordinatorMetrics metrics_;
  ParamCacheState param_cache_;  // counts into metrics_

  absl::Mutex clients_mu_;
  std::map<int64_t, std::pair<std::string, std::shared_ptr<WorkerClient>>> clients_
      ABSL_GUARDED_BY(clients_mu_);

  std::atomic<int64_t> next_request_ = 0;
  // Looks at InferAsync's requests still waiting after the watch period.
  DeadlineTimer watch_timer_;
  absl::Notification stop_;
  // Set by WakeControl: the control loop ticks now instead of at its period.
  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;
  const absl::Time started_at_ = absl::Now();
  std::thread control_thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_
