// ParamVersions: the coordinator's side of parameters as state, per model:
// pushes (BeginPush: a ParamPush, param_push.h, whose commit switches the
// model to version + 1 through PlacementManager::CommitVersion) and pulls
// (PullParams: the current version's bytes, read from the workers).
//
// A push stages a new version on the current placement's workers; its commit
// runs under the control lock, so no scale step runs between its check that
// membership did not change and the switch. At most one push per model, and
// options.max_concurrent_pushes over all models, stage at once. A commit
// waits (no lock held) while the switch would make more than
// options.max_live_versions versions of the model live, until the push's
// deadline: pushes do not fail while rollouts still run on old weights.
//
// Thread-safety: thread-safe. mu_ is a leaf lock, never held during an RPC.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_VERSIONS_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_VERSIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/params/param_push.h"
#include "server/coordinator/placement_manager.h"
#include "server/coordinator/worker_connections.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

// A pulled param's bytes (PullParams): the first chunk of a param sets shape,
// dtype, total_bytes and version.
struct PullChunk {
  std::string param;
  std::vector<int64_t> shape;
  std::optional<DType> dtype;  // the first chunk's
  int64_t total_bytes = 0;
  int64_t byte_offset = 0;
  std::string data;
  int64_t version = 0;
};

class ParamVersions {
 public:
  // Every pointer must outlive this (and every ParamPush it began); `pushed`
  // runs when a push ends, either way (the control step can unload what it
  // retired at once).
  ParamVersions(const CoordinatorOptions& options, PlacementManager* placements,
                WorkerRegistry* registry, WorkerConnections* connections,
                std::function<void()> pushed)
      : options_(options),
        placements_(placements),
        registry_(registry),
        connections_(connections),
        pushed_(std::move(pushed)) {}
  ParamVersions(const ParamVersions&) = delete;
  ParamVersions& operator=(const ParamVersions&) = delete;

  // Starts a push to `model`; the ParamPush commits at Finish and aborts when
  // dropped. Its commit first waits while it would make more than
  // options.max_live_versions versions of the model live
  // (PlacementManager::CommitVersion), until `deadline` or Finish's, the
  // earlier (the calls'; both infinite: options.load_timeout from the start
  // of the wait); then Finish fails
  // kDeadlineExceeded, the push aborts and the old version stays served.
  // \error kNotFound (unknown model), kFailedPrecondition (model with an
  //   error), kUnavailable (not placed), kAborted (a push to it is in progress),
  //   kResourceExhausted (options.max_concurrent_pushes pushes in progress).
  absl::StatusOr<std::unique_ptr<ParamPush>> BeginPush(
      const std::string& model, absl::Time deadline = absl::InfiniteFuture())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Streams `params` (empty: every param, in the model's order) of the current
  // version to `sink` in ~1 MiB chunks, each param assembled from one live
  // holder per distinct box (ReadParam). A sink error stops the pull.
  // \error as BeginPush; kNotFound for an unknown param.
  absl::Status PullParams(const std::string& model, const std::vector<std::string>& params,
                          const std::function<absl::Status(PullChunk)>& sink);

 private:
  // The bytes of `param` at placement `p`, each cell read from a live holder.
  absl::StatusOr<std::string> ReadParam(const ParamDef& param, const Placement& p);

  const CoordinatorOptions& options_;
  PlacementManager* const placements_;
  WorkerRegistry* const registry_;
  WorkerConnections* const connections_;
  const std::function<void()> pushed_;

  absl::Mutex mu_;
  std::set<std::string> pushing_ ABSL_GUARDED_BY(mu_);  // models with a push in progress
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_VERSIONS_H_
