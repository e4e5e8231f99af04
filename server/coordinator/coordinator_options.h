// The coordinator's options (coordinator.h), shared by the parts it owns:
// PlacementManager (placement_manager.h), ParamVersions (param_versions.h) and
// InferPipeline (infer_pipeline.h).
//
// Thread-safety: a plain value; each part keeps its own const copy.
#ifndef MESHSERVE_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_
#define MESHSERVE_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace meshserve {

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
  // Weight versions of one model live at once (the current one and each
  // retired one a sequence or request still holds); a push whose commit
  // would exceed it waits for one to drain, up to its deadline.
  int max_live_versions = 3;
  // A push session (params/push_sessions.h) no call touched for this long
  // expires: aborted on every worker, its staged bytes freed. Positive.
  absl::Duration push_ttl = absl::Seconds(300);
  // A box pull's plan (PlanPull) holds its version until EndPull or this
  // long. Positive.
  absl::Duration pull_lease = absl::Seconds(60);
  // The most compiled programs (one per model, generation, input shapes and
  // out_shardings) cached and installed at once; one more evicts the least
  // recently used and uninstalls it from its workers (program_cache.h).
  int64_t max_cached_programs = 256;
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

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_
