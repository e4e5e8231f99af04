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
// Requests are InferPipeline's (infer_pipeline.h): one asynchronous entry,
// InferAsync, and Infer, the same run on the caller's thread. They validate,
// admit (options.max_inflight_per_model per unbatched model; a batched
// model's Batcher), find or compile the program, run one Execute per worker
// at once, assemble, and retry once after a lost worker.
//
// The parts, each owned here: the worker clients (WorkerConnections,
// worker_connections.h), membership (WorkerRegistry, worker_registry.h), the
// compiled programs (ProgramCache, program_cache.h), the param cache's state
// (ParamCacheState, param_cache_state.h), the models and their placements
// (PlacementManager), parameter versions (ParamVersions) and requests
// (InferPipeline). This file's definitions are in coordinator.cc. README.md
// has a request's path.
//
// Thread-safety: all public methods are thread-safe. Locks, in acquisition
// order: the placement manager's (placement_manager.h) -> the parts' leaf
// locks (the pipeline's, the push admission's, the program cache's, the
// param cache's, the connections'). No lock is held during an RPC except
// the placement manager's control lock and a program cache entry's own mutex
// while its program is compiled and installed.
#ifndef MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_
#define MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/model/model_file.h"
#include "server/compiler/model_compiler.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/infer_pipeline.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/params/param_cache_state.h"
#include "server/coordinator/params/param_pull.h"
#include "server/coordinator/params/param_versions.h"
#include "server/coordinator/params/push_sessions.h"
#include "server/coordinator/placement_manager.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_connections.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

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

  // Membership (MembershipService). A worker that `warms_up` is told (in
  // *warm_bytes) how many bytes the next placement will put on it: the
  // placed models' param bytes x (1 + replicas) over the workers after the
  // join (an estimate); when that is not 0 it registers warming
  // (worker_registry.h) and is placed once a heartbeat says `warm`.
  absl::StatusOr<int64_t> RegisterWorker(const std::string& address, int32_t cores,
                                         int64_t memory_bytes, int64_t previous_worker_id,
                                         bool warms_up = false, int64_t* warm_bytes = nullptr);
  bool Heartbeat(int64_t worker_id, bool draining, bool warm = false);

  // One control step: expire dead workers, probe suspects, place models whose
  // workers changed, unload retired generations no request holds.
  void Tick();

  // Requests: InferPipeline::Infer and InferAsync (infer_pipeline.h).
  absl::StatusOr<InferResponse> Infer(const InferRequest& request);
  using InferDone = InferPipeline::InferDone;
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
  // `deadline` bounds a commit's wait for --max_live_versions (the call's).
  absl::StatusOr<std::unique_ptr<ParamPush>> BeginPush(
      const std::string& model, absl::Time deadline = absl::InfiniteFuture());
  absl::Status PullParams(const std::string& model, const std::vector<std::string>& params,
                          const std::function<absl::Status(PullChunk)>& sink);
  // Push sessions (params/push_sessions.h), expiring after options.push_ttl.
  PushSessions& push_sessions() { return push_sessions_; }

  // Box pulls: PlanPull / EndPull / PullParams of a box (params/param_pull.h).
  ParamPulls& param_pulls() { return pulls_; }
  // The connection to worker `worker_id` at `address` (WorkerConnections::Get),
  // for calls outside a request (generation's ReleaseSequences).
  absl::StatusOr<std::shared_ptr<WorkerClient>> WorkerClientFor(int64_t worker_id,
                                                                const std::string& address) {
    return connections_.Get(worker_id, address);
  }
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
  // The program cache's on_evict. An evicted plan's programs are uninstalled
  // from its workers once no request holds the plan (checked here and on
  // every Tick), unless the cache has a plan of the same program id again
  // (compiled again: its install replaced them). On the shared executor,
  // best effort (a failure is logged).
  void UninstallEvicted(std::shared_ptr<const CompiledPlan> plan);
  void UninstallReleased();
  void UninstallPlan(const CompiledPlan& plan);

  const CoordinatorOptions options_;
  const std::unique_ptr<ModelCompiler> compiler_;
  WorkerRegistry registry_;
  WorkerConnections connections_;
  CoordinatorMetrics metrics_;  // before the parts that count into it
  ProgramCache program_cache_;
  ParamCacheState param_cache_;  // counts into metrics_
  PlacementManager placements_;
  ParamVersions params_;
  PushSessions push_sessions_;  // after params_: its sessions end first
  InferPipeline infer_;
  ParamPulls pulls_;  // last: its leases are dropped first

  absl::Notification stop_;
  // Set by WakeControl: the control loop ticks now instead of at its period.
  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread control_thread_;
  absl::Mutex uninstall_mu_;
  // Evicted plans some request still holds.
  std::vector<std::shared_ptr<const CompiledPlan>> evicted_ ABSL_GUARDED_BY(uninstall_mu_);
  // Uninstall tasks not finished yet (the destructor waits for them).
  int64_t uninstalls_pending_ ABSL_GUARDED_BY(uninstall_mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COORDINATOR_H_
