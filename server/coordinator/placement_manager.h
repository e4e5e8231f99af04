// PlacementManager: the coordinator's models and where they run. It holds
// each model of the model directory (with its load error, if any) and its
// current placement, and runs the control step (Tick) that keeps placements
// on the live workers (../shared/design/architecture.md).
//
// Membership and placement. Workers Register and Heartbeat (worker_registry.h).
// The control step (Tick(), run every heartbeat_interval/2 by the
// coordinator's thread) expires dead workers, probes suspects (workers a call
// failed on, or whose connection dropped: a killed process is found within a
// tick, not after its missed heartbeats; worker_connections.h), and whenever
// the set of live, non-draining workers differs from a model's placement
// computes a new placement (placement.h) with a new generation, loads it on
// every worker (LoadModel, in parallel), and only then switches the model to
// it. A request pins the placement it started on (shared_ptr), so requests in
// flight finish on the old generation and no answer mixes generations; a
// retired placement is unloaded (UnloadModel) once no request holds it.
//
// Parameters are state (param_moves.h, param_versions.h). A placement carries
// a parameter version (1 at load) and, with options.replicas = 1, replica
// devices (placement.h). A scale step loads the new placement with sources
// from the old one's live holders (draining workers included), keeping the
// version, and records a ScaleStep. A push's commit switches to a new
// Placement of the same generation and version + 1 (CommitVersion). On its
// first placement of a model this coordinator asks the live workers what they
// hold: a complete placement on exactly the workers it would use is adopted as
// is; otherwise their newest version is the source of the new placement (a
// restarted coordinator re-initialises nothing a live worker still holds).
// After a restart the workers come back one by one (each at its next
// heartbeat): while a returning worker (one that registered with the id it
// had) is among the live ones, first placements wait until no worker has
// registered for options.rejoin_quiet (at most 5 times that after this
// coordinator started), so a model is not first placed on the one or two
// workers back so far, re-initialising what the others still hold. Scale
// steps need no cap: Tick places one model at a time under control_mu_, so at
// most one scale step runs at any time, beside the pushes (whose commits also
// take control_mu_).
//
// Held versions follow the placement. A generation sequence decodes under
// one version from first to last token: when a scale step places a new
// generation while a retired version is still held (by a sequence or
// request; at most options.max_live_versions), that version is made resident
// on the new placement too, after the current one, its cells moved from the
// live holders of its retired placement (or of the current generation, where
// an earlier scale step loaded it) exactly as the current version's are. A
// held version whose cells cannot be rebuilt (its only copies were on a lost
// worker) is logged and left out: requests for it fail on the workers with
// NOT_FOUND naming the version. A carried version is unloaded from the current
// generation once nothing holds it (UnloadRetired).
//
// Definitions: placement_manager.cc (the model table, the control step,
// status, commits, unloads) and placement_manager_steps.cc (one scale step:
// PlaceModel, LoadPlacement, adoption).
//
// Thread-safety: all public methods are thread-safe. Locks, in acquisition
// order: control_mu_ (one control step, or a push's commit and switch, at a
// time) -> mu_ (models, placements) -> the program cache's and the
// connections' locks. No lock is held during an RPC except control_mu_.
#ifndef MESHSERVE_SERVER_COORDINATOR_PLACEMENT_MANAGER_H_
#define MESHSERVE_SERVER_COORDINATOR_PLACEMENT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
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
#include "common/model/model_file.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/params/param_cache_state.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_connections.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

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
  // Versions some sequence or request holds (current or retired) -> holders,
  // and pushes whose commit waits for one to drain (max_live_versions).
  std::map<int64_t, int64_t> held_versions;
  int commits_waiting = 0;
  std::shared_ptr<const ModelFile> model;  // null when the file did not parse
  std::shared_ptr<const Placement> placement;
};

class PlacementManager {
 public:
  // Every pointer must outlive this.
  PlacementManager(const CoordinatorOptions& options, WorkerRegistry* registry,
                   WorkerConnections* connections, ProgramCache* program_cache,
                   ParamCacheState* param_cache, CoordinatorMetrics* metrics);
  PlacementManager(const PlacementManager&) = delete;
  PlacementManager& operator=(const PlacementManager&) = delete;

  // A model of the model directory (`model` null and `error` set when its
  // file did not parse; `error` set when it cannot be served). A second
  // model of the same name replaces the first.
  void AddModel(const std::string& name, std::string file, std::shared_ptr<const ModelFile> model,
                absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);

  // One control step: expire dead workers, probe suspects, place models whose
  // workers changed, unload retired generations no request holds, forget
  // departed workers.
  void Tick() ABSL_LOCKS_EXCLUDED(control_mu_);

  // The model of a loaded, servable model.
  // \error kNotFound (unknown), kFailedPrecondition (its load error).
  absl::StatusOr<std::shared_ptr<const ModelFile>> ServableModel(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The model's placement (null: unknown or not placed yet).
  std::shared_ptr<const Placement> CurrentPlacement(const std::string& model) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // A retired placement of `model` at `version` that something still holds
  // (null: none); holding the pointer keeps that version from being unloaded
  // (a box pull of an old version pins it so).
  std::shared_ptr<const Placement> RetiredPlacement(const std::string& model,
                                                    int64_t version) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every model that loaded is placed, on live workers only.
  bool IsReady() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<ModelStatus> ModelStatuses() const ABSL_LOCKS_EXCLUDED(mu_);

  // A push's commit and switch (param_versions.h): under control_mu_, while
  // `at` is still the model's placement and all its workers are alive, runs
  // `commit` and, when it succeeds, switches to `at` with version + 1.
  // Version bound: the model's live versions are its current one and each
  // retired one some sequence or request still holds (a holder beyond this
  // manager's own reference; the push's own single pin of `at`, the caller's,
  // is left out: `at` itself is weak). Before
  // the commit, the push waits, holding no lock, until the switch keeps them
  // within options.max_live_versions: the new version plus every version
  // held at the check (the replaced one only if held), checked again under
  // the locks right before the commit. A sequence that starts on the
  // replaced version during the commit's own round trip is the only way
  // past the bound (by that one version, until it ends).
  // \error kAborted (membership changed during the push), kDeadlineExceeded
  //   (the held versions did not drain by `deadline`: names the bound and
  //   each held version with its holders; nothing changed), else commit's.
  absl::Status CommitVersion(const std::string& model, const std::weak_ptr<const Placement>& at,
                             const std::function<absl::Status()>& commit, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(control_mu_, mu_);

 private:
  struct ModelEntry {
    std::string file;
    std::shared_ptr<const ModelFile> model;  // null when parsing failed
    absl::Status error;                      // not servable when non-OK
    std::shared_ptr<const Placement> placement;
    absl::Time placed_at = absl::InfinitePast();
    absl::Status placement_error;
    absl::Time next_attempt = absl::InfinitePast();
    bool pushed = false;         // a push committed: no seed/checkpoint fallback
    bool asked_workers = false;  // the first placement asked workers' holdings
    std::vector<ScaleStep> scale_steps;
    int commits_waiting = 0;  // pushes waiting for a version to drain
    // Held retired versions loaded on placement's generation besides its own.
    std::set<int64_t> carried_versions;
  };
  // A held version to carry to a new placement: its move plan.
  struct CarriedVersion {
    int64_t version = 0;
    ParamMovePlan plan;
  };
  // What live workers report holding of a model (coordinator restart).
  struct WorkerHoldings {
    std::optional<Placement> adoptable;  // complete, on exactly the planned workers
    std::vector<ParamHolding> newest;    // every holding of the newest version
    int64_t version = 1;
    int64_t max_generation = 0;
  };

  void PlaceModels() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // True while returning workers may still be re-registering (see above).
  bool AwaitingReturningWorkers(absl::Time now) const;
  void PlaceModel(const std::string& name, const ModelFile& model,
                  const std::vector<WorkerInfo>& live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Loads `placement` with `sources` (PlanParamMoves) on its workers in
  // parallel; sums what they report into *result. A failure unloads what
  // loaded: the generation, or only the version when `carried`.
  absl::Status LoadPlacement(const ModelFile& model, const Placement& placement,
                             const std::map<int64_t, std::vector<ParamPieceIr>>& sources,
                             LoadModelResultIr* result, bool carried = false);
  // The held versions of `name` other than `current`'s to carry to `next`
  // (see above), each planned from its live holders; a version that cannot be
  // rebuilt is logged and left out.
  std::vector<CarriedVersion> PlanCarriedVersions(const std::string& name, const ModelFile& model,
                                                  const Placement& next,
                                                  const std::shared_ptr<const Placement>& current)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Plans (PlanCarriedVersions) and loads each held version to carry on
  // `next` (loaded: `next`'s own version is); returns the versions that
  // loaded.
  std::set<int64_t> CarryHeldVersions(const std::string& name, const ModelFile& model,
                                      const Placement& next,
                                      const std::shared_ptr<const Placement>& current);
  // The old holdings of a scale step from `current` (live workers; one that
  // re-registered since `placed_at` only if its Status still lists the
  // placement).
  std::vector<ParamHolding> CurrentHoldings(const Placement& current, absl::Time placed_at);
  bool StillHolds(int64_t worker_id, const Placement& placement);
  WorkerHoldings AskHoldings(const std::string& model, const Placement& planned);
  // The first placement of `name` after start: adopts what the workers hold
  // (true) or sets the old holdings, version and pushed flag from it (false).
  bool AdoptOrAsk(const std::string& name, const Placement& planned,
                  std::vector<ParamHolding>* old, int64_t* version, bool* pushed)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After LoadPlacement of `next`: switches to it (recording the step) or
  // records the failure.
  void FinishLoad(const std::string& name, Placement next, const ParamMoveStats& planned,
                  const LoadModelResultIr& result, const absl::Status& loaded, double seconds,
                  std::set<int64_t> carried) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the step and switches the model to `next` (mu_ held).
  void SwitchTo(ModelEntry& entry, const std::string& name, Placement next, ScaleStep step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnloadRetired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // The held versions of `name` (current and retired, see CommitVersion):
  // version -> holders beyond this manager and `pins` references to the
  // current placement.
  std::map<int64_t, int64_t> HeldVersions(const std::string& name, int64_t pins) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK while `name`'s placement is still `at` on live workers, else kAborted.
  absl::Status StillAt(const std::string& name, const std::weak_ptr<const Placement>& at) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (no lock held between checks) until a switch of `name` keeps its
  // live versions within the bound; kDeadlineExceeded at `deadline`.
  absl::Status AwaitVersionRoom(const std::string& name, const std::weak_ptr<const Placement>& at,
                                absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets dead workers that no placement (current or retired) uses.
  void ForgetDeparted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);

  const CoordinatorOptions& options_;
  WorkerRegistry* const registry_;
  WorkerConnections* const connections_;
  ProgramCache* const program_cache_;
  ParamCacheState* const param_cache_;
  CoordinatorMetrics* const metrics_;

  absl::Mutex control_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, ModelEntry> models_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const Placement>> retired_ ABSL_GUARDED_BY(mu_);
  int64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  const absl::Time started_at_ = absl::Now();
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PLACEMENT_MANAGER_H_
