// PlacementManager (placement_manager.h): one scale step. PlaceModel plans the
// param moves from the live holders, loads the new placement on its workers
// and switches to it; after a coordinator restart it first adopts what the
// workers hold, or takes their newest version as the source.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "server/coordinator/fan_out.h"
#include "server/coordinator/placement_manager.h"

namespace meshserve {
namespace {

constexpr size_t kMaxScaleSteps = 16;

}  // namespace

absl::Status PlacementManager::LoadPlacement(
    const ModelFile& model, const Placement& placement,
    const std::map<int64_t, std::vector<ParamPieceIr>>& sources, LoadModelResultIr* total,
    bool carried) {
  std::vector<int64_t> ids = placement.WorkerIds();
  absl::Mutex sum_mu;
  std::vector<absl::Status> results = ParallelCall(ids, [&](int64_t id) {
    LoadModelIr call;
    call.model = placement.model;
    call.generation = placement.generation;
    call.model_json = model.json_text;
    call.model_dir = model.model_dir;
    call.mesh = MeshToIr(placement.mesh);
    call.devices = placement.devices_by_worker.at(id);
    call.device_workers = placement.device_workers;
    call.worker_addresses = placement.worker_addresses;
    call.version = placement.version;
    call.replica_devices = placement.ReplicaDevices(id);
    auto pieces = sources.find(id);
    if (pieces != sources.end()) call.sources = pieces->second;
    for (const ParamPieceIr& piece : call.sources) {  // sources outside the placement
      if (call.worker_addresses.count(piece.src_worker)) continue;
      absl::StatusOr<WorkerInfo> info = registry_->Get(piece.src_worker);
      if (info.ok()) call.worker_addresses[piece.src_worker] = info->address;
    }
    absl::StatusOr<std::shared_ptr<WorkerClient>> client =
        connections_->Get(id, placement.worker_addresses.at(id));
    absl::StatusOr<LoadModelResultIr> result =
        client.ok() ? (*client)->LoadModel(call, options_.load_timeout) : client.status();
    if (result.ok()) {
      absl::MutexLock lock(&sum_mu);
      total->param_bytes += result->param_bytes;
      total->bytes_fetched += result->bytes_fetched;
      total->bytes_local += result->bytes_local;
    }
    return AnnotateStatus(result.status(), "LoadModel on worker ", id);
  });
  for (size_t i = 0; i < ids.size(); ++i) {
    if (results[i].ok()) continue;
    if (IsWorkerFailure(results[i])) registry_->MarkSuspect(ids[i]);
    for (int64_t id : ids) {  // best effort: free what did load
      auto client = connections_->Get(id, placement.worker_addresses.at(id));
      if (client.ok()) {
        (*client)
            ->UnloadModel(placement.model, placement.generation, carried ? placement.version : 0,
                          options_.control_timeout)
            .IgnoreError();
      }
    }
    return results[i];
  }
  return absl::OkStatus();
}

bool PlacementManager::StillHolds(int64_t worker_id, const Placement& placement) {
  absl::StatusOr<WorkerInfo> info = registry_->Get(worker_id);
  if (!info.ok() || !info->alive) return false;
  absl::StatusOr<std::shared_ptr<WorkerClient>> client =
      connections_->Get(worker_id, info->address);
  if (!client.ok()) return false;
  absl::StatusOr<WorkerStatusIr> status = (*client)->Status(options_.control_timeout);
  if (!status.ok()) return false;
  for (const HostedModelIr& m : status->models) {
    if (m.model == placement.model && m.generation == placement.generation &&
        m.version == placement.version) {
      return true;
    }
  }
  return false;
}

std::vector<ParamHolding> PlacementManager::CurrentHoldings(const Placement& current,
                                                            absl::Time placed_at) {
  std::vector<ParamHolding> holdings = HoldingsOf(current);
  for (ParamHolding& h : holdings) {
    absl::StatusOr<WorkerInfo> info = registry_->Get(h.worker_id);
    h.live = info.ok() && info->alive;
    // A worker that registered again may be a new process with nothing.
    if (h.live && info->registered_at > placed_at) h.live = StillHolds(h.worker_id, current);
  }
  return holdings;
}

PlacementManager::WorkerHoldings PlacementManager::AskHoldings(const std::string& model,
                                                               const Placement& planned) {
  std::vector<WorkerInfo> alive;
  for (const WorkerInfo& w : registry_->AllWorkers()) {
    if (w.alive) alive.push_back(w);
  }
  std::vector<int64_t> ids;
  for (const WorkerInfo& w : alive) ids.push_back(w.worker_id);
  std::vector<absl::StatusOr<WorkerStatusIr>> statuses =
      ParallelCall(ids, [&](int64_t id) -> absl::StatusOr<WorkerStatusIr> {
        const size_t i = std::find(ids.begin(), ids.end(), id) - ids.begin();
        MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client,
                            connections_->Get(id, alive[i].address));
        return client->Status(options_.control_timeout);
      });
  WorkerHoldings out;
  // (generation, version) -> (worker, hosted)
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, HostedModelIr>>> groups;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!statuses[i].ok()) continue;
    for (const HostedModelIr& m : statuses[i]->models) {
      if (m.model != model) continue;
      out.max_generation = std::max(out.max_generation, m.generation);
      out.version = std::max(out.version, m.version);
      groups[{m.generation, m.version}].push_back({ids[i], m});
    }
  }
  const std::vector<int64_t> planned_ids = planned.WorkerIds();
  for (const auto& [key, members] : groups) {
    if (key.second != out.version) continue;
    bool complete = members.size() == planned_ids.size();
    for (const auto& [id, m] : members) {
      absl::StatusOr<Mesh> mesh = MeshFromIr(m.mesh);
      if (!mesh.ok()) continue;
      out.newest.push_back(
          ParamHolding{id, m.generation, m.version, *mesh, m.devices, m.replica_devices, true});
      auto devices = planned.devices_by_worker.find(id);
      complete = complete && *mesh == planned.mesh && m.device_workers == planned.device_workers &&
                 devices != planned.devices_by_worker.end() && m.devices == devices->second &&
                 m.replica_devices == planned.ReplicaDevices(id);
    }
    if (complete) {
      out.adoptable = planned;
      out.adoptable->generation = key.first;
      out.adoptable->version = key.second;
    }
  }
  return out;
}

void PlacementManager::SwitchTo(ModelEntry& entry, const std::string& name, Placement next,
                                ScaleStep step) {
  if (entry.placement != nullptr) retired_.push_back(entry.placement);
  entry.placement = std::make_shared<const Placement>(std::move(next));
  entry.carried_versions.clear();
  entry.placed_at = absl::Now();
  entry.placement_error = absl::OkStatus();
  entry.scale_steps.push_back(step);
  if (entry.scale_steps.size() > kMaxScaleSteps) entry.scale_steps.erase(entry.scale_steps.begin());
  MS_LOG(INFO) << "model '" << name << "' now serves generation " << entry.placement->generation
               << " version " << entry.placement->version << " (scale step: " << step.workers
               << " workers, " << step.seconds << " s, moved " << step.stats.bytes_moved
               << " bytes (lower bound " << step.stats.lower_bound_bytes << "), local "
               << step.stats.bytes_local << ", initialized " << step.stats.bytes_initialized << ")";
}

bool PlacementManager::AdoptOrAsk(const std::string& name, const Placement& planned,
                                  std::vector<ParamHolding>* old, int64_t* version, bool* pushed) {
  WorkerHoldings held = AskHoldings(name, planned);
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_[name];
  entry.asked_workers = true;
  next_generation_ = std::max(next_generation_, held.max_generation + 1);
  if (held.version > 1) entry.pushed = *pushed = true;
  if (held.adoptable) {
    MS_LOG(INFO) << "model '" << name
                 << "': adopting what the workers hold: " << held.adoptable->ToString();
    const int64_t generation = held.adoptable->generation;
    SwitchTo(entry, name, *std::move(held.adoptable),
             ScaleStep{generation, static_cast<int64_t>(planned.WorkerIds().size()), 0, {}});
    return true;
  }
  *old = std::move(held.newest);
  *version = held.version;
  return false;
}

std::vector<PlacementManager::CarriedVersion> PlacementManager::PlanCarriedVersions(
    const std::string& name, const ModelFile& model, const Placement& next,
    const std::shared_ptr<const Placement>& current) {
  std::vector<CarriedVersion> out;
  if (current == nullptr) return out;
  // Held version -> placements where it is resident (retired ones, and the
  // current generation where an earlier step carried it).
  std::map<int64_t, std::vector<Placement>> where;
  {
    absl::MutexLock lock(&mu_);
    const ModelEntry& entry = models_.at(name);
    for (const auto& [version, holders] : HeldVersions(name, 0)) {
      if (version == current->version) continue;
      std::vector<Placement>& at = where[version];
      for (const auto& r : retired_) {
        if (r->model == name && r->version == version) at.push_back(*r);
      }
      if (entry.carried_versions.count(version) && entry.placement != nullptr) {
        at.push_back(*entry.placement);
        at.back().version = version;
      }
    }
  }
  for (auto& [version, placements] : where) {
    std::vector<ParamHolding> old;
    for (const Placement& p : placements) {
      for (ParamHolding h : HoldingsOf(p)) {
        h.live = StillHolds(h.worker_id, p);  // alive, and still has it
        old.push_back(std::move(h));
      }
    }
    Placement at = next;
    at.version = version;
    absl::StatusOr<ParamMovePlan> plan = PlanParamMoves(model, old, at, /*pushed=*/true);
    if (!plan.ok()) {
      MS_LOG(ERROR) << "model '" << name << "': held version " << version
                    << " cannot follow to generation " << next.generation
                    << "; its sequences will fail: " << plan.status();
      continue;
    }
    out.push_back(CarriedVersion{version, *std::move(plan)});
  }
  return out;
}

std::set<int64_t> PlacementManager::CarryHeldVersions(
    const std::string& name, const ModelFile& model, const Placement& next,
    const std::shared_ptr<const Placement>& current) {
  std::set<int64_t> loaded;
  for (const CarriedVersion& c : PlanCarriedVersions(name, model, next, current)) {
    Placement at = next;
    at.version = c.version;
    LoadModelResultIr result;
    absl::Status s = LoadPlacement(model, at, c.plan.sources, &result, /*carried=*/true);
    if (!s.ok()) {
      MS_LOG(ERROR) << "model '" << name << "': held version " << c.version
                    << " did not load on generation " << next.generation
                    << "; its sequences will fail: " << s;
      continue;
    }
    MS_LOG(INFO) << "model '" << name << "': held version " << c.version << " carried to generation "
                 << next.generation << " (moved " << result.bytes_fetched << " bytes, local "
                 << result.bytes_local << ")";
    loaded.insert(c.version);
  }
  return loaded;
}

void PlacementManager::PlaceModel(const std::string& name, const ModelFile& model,
                                  const std::vector<WorkerInfo>& live) {
  std::vector<PlacementWorker> workers;
  for (const WorkerInfo& w : live) workers.push_back({w.worker_id, w.address});
  absl::StatusOr<Placement> next = ComputePlacement(model, workers, 0, options_.replicas);
  std::shared_ptr<const Placement> current;
  absl::Time placed_at;
  bool pushed = false;
  bool ask = false;
  std::vector<int64_t> restarted;  // re-registered since the placement loaded
  {
    absl::MutexLock lock(&mu_);
    ModelEntry& entry = models_[name];
    if (!next.ok()) {
      entry.placement_error = next.status();
      entry.next_attempt = absl::Now() + options_.placement_retry_backoff;
      return;
    }
    for (const WorkerInfo& w : live) {
      if (next->devices_by_worker.count(w.worker_id) && w.registered_at > entry.placed_at) {
        restarted.push_back(w.worker_id);
      }
    }
    current = entry.placement;
    if (current != nullptr && current->SameLayoutAs(*next) && restarted.empty()) return;
    placed_at = entry.placed_at;
    pushed = entry.pushed;
    ask = current == nullptr && !entry.asked_workers;
  }
  if (current != nullptr && current->SameLayoutAs(*next) &&
      std::all_of(restarted.begin(), restarted.end(),
                  [&](int64_t id) { return StillHolds(id, *current); })) {
    // Workers that re-registered (this coordinator forgot them) with their
    // state intact: nothing moves.
    absl::MutexLock lock(&mu_);
    models_[name].placed_at = absl::Now();
    return;
  }
  std::vector<ParamHolding> old;
  int64_t version = 1;
  if (current != nullptr) {
    old = CurrentHoldings(*current, placed_at);
    version = current->version;
  } else if (ask && AdoptOrAsk(name, *next, &old, &version, &pushed)) {
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    next->generation = next_generation_++;
  }
  next->version = version;
  absl::StatusOr<ParamMovePlan> plan = PlanParamMoves(model, old, *next, pushed);
  if (!plan.ok()) {
    MS_LOG(ERROR) << "model '" << name << "' cannot move to " << next->ToString() << ": "
                  << plan.status();
    absl::MutexLock lock(&mu_);
    ModelEntry& entry = models_[name];
    if (absl::IsDataLoss(plan.status()) && current != nullptr) {
      entry.error = plan.status();  // never serve re-initialised pushed weights
    } else {
      // With nothing served yet (a restarted coordinator adopting what the
      // workers hold), the missing holders may not have re-registered yet:
      // wait, and ask every live worker again on the next attempt.
      entry.placement_error = plan.status();
      entry.next_attempt = absl::Now() + options_.placement_retry_backoff;
      if (current == nullptr) entry.asked_workers = false;
    }
    return;
  }
  MS_LOG(INFO) << "placing model '" << name << "': " << next->ToString();
  const absl::Time load_start = absl::Now();
  LoadModelResultIr result;
  absl::Status loaded = LoadPlacement(model, *next, plan->sources, &result);
  std::set<int64_t> carried;
  if (loaded.ok()) carried = CarryHeldVersions(name, model, *next, current);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - load_start);
  metrics_->placement_seconds.Observe({name}, seconds);
  metrics_->placement_events.Increment({name, loaded.ok() ? "loaded" : "failed"});
  metrics_->placement_bytes.Increment({name}, loaded.ok() ? result.param_bytes : 0);
  FinishLoad(name, *std::move(next), plan->stats, result, loaded, seconds, std::move(carried));
}

void PlacementManager::FinishLoad(const std::string& name, Placement next,
                                  const ParamMoveStats& planned, const LoadModelResultIr& result,
                                  const absl::Status& loaded, double seconds,
                                  std::set<int64_t> carried) {
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_[name];
  if (!loaded.ok()) {
    MS_LOG(WARNING) << "placing model '" << name << "' failed: " << loaded;
    // ABORTED: a worker gave up on the load because of another (a peer).
    const bool worker_trouble = IsWorkerFailure(loaded) || absl::IsAborted(loaded);
    if (!worker_trouble) {
      // The model itself cannot load (missing or corrupt checkpoint, ...): it
      // is reported like a bad file and does not hold readiness back.
      entry.error = loaded;
      return;
    }
    entry.placement_error = loaded;
    entry.next_attempt = absl::Now() + options_.placement_retry_backoff;
    return;
  }
  ScaleStep step{next.generation, static_cast<int64_t>(next.WorkerIds().size()), seconds, planned};
  // What the workers did (the plan's numbers when they agree).
  if (result.bytes_fetched != planned.bytes_moved || result.bytes_local != planned.bytes_local) {
    MS_LOG(WARNING) << "model '" << name << "': workers moved " << result.bytes_fetched
                    << " bytes and copied " << result.bytes_local << " locally; planned "
                    << planned.bytes_moved << " and " << planned.bytes_local;
  }
  step.stats.bytes_moved = result.bytes_fetched;
  step.stats.bytes_local = result.bytes_local;
  SwitchTo(entry, name, std::move(next), step);
  entry.carried_versions = std::move(carried);
}

}  // namespace meshserve
