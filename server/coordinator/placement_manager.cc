// PlacementManager (placement_manager.h): the model table, the control step,
// the status views, a push's version switch and the unload of retired
// placements. One scale step is in placement_manager_steps.cc.
#include "server/coordinator/placement_manager.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

PlacementManager::PlacementManager(const CoordinatorOptions& options, WorkerRegistry* registry,
                                   WorkerConnections* connections, ProgramCache* program_cache,
                                   ParamCacheState* param_cache, CoordinatorMetrics* metrics)
    : options_(options),
      registry_(registry),
      connections_(connections),
      program_cache_(program_cache),
      param_cache_(param_cache),
      metrics_(metrics) {}

void PlacementManager::AddModel(const std::string& name, std::string file,
                                std::shared_ptr<const ModelFile> model, absl::Status error) {
  ModelEntry entry;
  entry.file = std::move(file);
  entry.model = std::move(model);
  entry.error = std::move(error);
  absl::MutexLock lock(&mu_);
  models_[name] = std::move(entry);
}

void PlacementManager::Tick() {
  absl::MutexLock control(&control_mu_);
  registry_->ExpireDead(absl::Now());
  connections_->WatchDropped();
  connections_->ProbeSuspects();
  PlaceModels();
  UnloadRetired();
  ForgetDeparted();
}

void PlacementManager::ForgetDeparted() {
  std::set<int64_t> in_use;
  {
    absl::MutexLock lock(&mu_);
    auto add = [&in_use](const Placement& p) {
      for (int64_t id : p.WorkerIds()) in_use.insert(id);
      for (const auto& [id, devices] : p.replica_devices_by_worker) in_use.insert(id);
    };
    for (const auto& [name, entry] : models_) {
      if (entry.placement != nullptr) add(*entry.placement);
    }
    for (const auto& p : retired_) add(*p);
  }
  for (int64_t id : registry_->ForgetDead(absl::Now(), options_.forget_dead_after,
                                          [&in_use](int64_t id) { return in_use.count(id) > 0; })) {
    MS_LOG(INFO) << "worker " << id << " forgotten: dead for "
                 << absl::FormatDuration(options_.forget_dead_after) << " and no placement uses it";
  }
}

absl::StatusOr<std::shared_ptr<const ModelFile>> PlacementManager::ServableModel(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    std::vector<std::string> names;
    for (const auto& [known, entry] : models_) names.push_back(known);
    return NotFound("model '", name, "' not found (models: ", absl::StrJoin(names, ", "), ")");
  }
  if (!it->second.error.ok()) {
    return FailedPrecondition("model '", name, "' cannot be served: ", it->second.error.message());
  }
  return it->second.model;
}

std::shared_ptr<const Placement> PlacementManager::CurrentPlacement(
    const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : it->second.placement;
}

bool PlacementManager::IsReady() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    if (!entry.error.ok()) continue;
    if (entry.placement == nullptr) return false;
    for (const auto& [id, address] : entry.placement->worker_addresses) {
      if (!registry_->IsAlive(id)) return false;
    }
  }
  return true;
}

std::vector<ModelStatus> PlacementManager::ModelStatuses() const {
  const int live = static_cast<int>(registry_->PlaceableWorkers().size());
  const bool returning = AwaitingReturningWorkers(absl::Now());
  std::vector<ModelStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    ModelStatus s;
    s.name = name;
    s.file = entry.file;
    s.error = entry.error;
    s.model = entry.model;
    s.placement = entry.placement;
    s.scale_steps = entry.scale_steps;
    if (!entry.error.ok()) {
      s.state = absl::StrCat("error: ", entry.error.message());
    } else if (entry.placement != nullptr) {
      s.ready = true;
      s.state = "ready";
      s.mesh = entry.placement->mesh.ToString();
      s.generation = entry.placement->generation;
      s.version = entry.placement->version;
      s.replicas = entry.placement->replica_devices_by_worker.empty() ? 0 : 1;
    } else if (!entry.placement_error.ok()) {
      s.state = absl::StrCat("placement failed: ", entry.placement_error.message());
    } else if (returning && live >= options_.min_workers) {
      s.state = absl::StrCat("waiting for returning workers to register again (", live, " back)");
    } else {
      s.state = absl::StrCat("waiting for workers (", live, "/", options_.min_workers, ")");
    }
    out.push_back(std::move(s));
  }
  return out;
}

void PlacementManager::PlaceModels() {
  std::vector<WorkerInfo> live = registry_->PlaceableWorkers();
  if (live.empty()) return;
  // min_workers (and, after a restart, the returning workers) gate a model's
  // first placement; once placed, it follows membership (a lost worker must
  // not leave it on a dead placement).
  const absl::Time now = absl::Now();
  const bool enough =
      static_cast<int>(live.size()) >= options_.min_workers && !AwaitingReturningWorkers(now);
  std::vector<std::pair<std::string, std::shared_ptr<const ModelFile>>> todo;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, entry] : models_) {
      if (!entry.error.ok() || entry.model == nullptr) continue;
      if (now < entry.next_attempt) continue;
      if (!enough && entry.placement == nullptr) continue;
      todo.push_back({name, entry.model});
    }
  }
  for (const auto& [name, model] : todo) PlaceModel(name, *model, live);
}

bool PlacementManager::AwaitingReturningWorkers(absl::Time now) const {
  const absl::Duration quiet = options_.rejoin_quiet;
  if (now - started_at_ >= 5 * quiet || !registry_->AnyReturning()) return false;
  return now - registry_->LastRegistration() < quiet;
}

absl::Status PlacementManager::CommitVersion(const std::string& name,
                                             const std::shared_ptr<const Placement>& at,
                                             const std::function<absl::Status()>& commit) {
  // No placement happens between the check and the switch: PlaceModel runs
  // under control_mu_ too.
  absl::MutexLock control(&control_mu_);
  auto moved = [&] {
    return absl::AbortedError(
        absl::StrCat("model ", name, ": membership changed during the push; nothing changed"));
  };
  {
    absl::MutexLock lock(&mu_);
    const ModelEntry& entry = models_.at(name);
    if (entry.placement != at) return moved();
    for (const auto& [id, address] : at->worker_addresses) {
      if (!registry_->IsAlive(id)) return moved();
    }
  }
  MS_RETURN_IF_ERROR(commit());
  auto next = std::make_shared<Placement>(*at);
  next->version = at->version + 1;
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_.at(name);
  retired_.push_back(entry.placement);
  entry.placement = std::move(next);
  entry.pushed = true;
  MS_LOG(INFO) << "model '" << name << "' now serves version " << entry.placement->version
               << " (generation " << entry.placement->generation << ")";
  return absl::OkStatus();
}

void PlacementManager::UnloadRetired() {
  struct Unload {
    std::shared_ptr<const Placement> placement;
    bool whole_generation;  // no other placement of the model uses it
  };
  std::vector<Unload> done;
  {
    absl::MutexLock lock(&mu_);
    // Runs under mu_ (annotated so that clang's analysis sees it).
    auto uses_generation = [&](const Placement& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto entry = models_.find(p.model);
      if (entry != models_.end() && entry->second.placement != nullptr &&
          entry->second.placement->generation == p.generation) {
        return true;
      }
      for (const auto& r : retired_) {
        if (r.get() != &p && r->model == p.model && r->generation == p.generation) return true;
      }
      return false;
    };
    auto it = retired_.begin();
    while (it != retired_.end()) {
      if (it->use_count() == 1) {
        std::shared_ptr<const Placement> p = std::move(*it);
        it = retired_.erase(it);
        const bool whole = !uses_generation(*p);
        done.push_back({std::move(p), whole});
      } else {
        ++it;
      }
    }
  }
  for (const Unload& u : done) {
    const Placement& placement = *u.placement;
    for (const auto& [id, address] : placement.worker_addresses) {
      if (!registry_->IsAlive(id)) continue;
      auto client = connections_->Get(id, address);
      if (!client.ok()) continue;
      absl::Status s = (*client)->UnloadModel(placement.model, placement.generation,
                                              u.whole_generation ? 0 : placement.version,
                                              options_.control_timeout);
      if (!s.ok()) MS_LOG(WARNING) << "unload on worker " << id << ": " << s;
    }
    if (u.whole_generation) {
      program_cache_->EraseGeneration(placement.model, placement.generation);
      param_cache_->EraseGeneration(placement.model, placement.generation);
    }
  }
}

}  // namespace meshserve
