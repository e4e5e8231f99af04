// PlacementManager (placement_manager.h): the model table, the control step,
// the status views, a push's version switch and the unload of retired
// placements. One scale step is in placement_manager_steps.cc.
#include "server/coordinator/placement_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

// A push pins the placement it began on with one reference (param_versions.cc).
constexpr int64_t kPushPins = 1;

}  // namespace

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

std::shared_ptr<const Placement> PlacementManager::RetiredPlacement(const std::string& model,
                                                                   int64_t version) const {
  absl::MutexLock lock(&mu_);
  for (const auto& r : retired_) {
    if (r->model == model && r->version == version) return r;
  }
  return nullptr;
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
    s.held_versions = HeldVersions(name, 0);  // before s.placement holds it too
    s.commits_waiting = entry.commits_waiting;
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

std::map<int64_t, int64_t> PlacementManager::HeldVersions(const std::string& name,
                                                          int64_t pins) const {
  std::map<int64_t, int64_t> held;
  // Less this manager's reference (and the pins).
  auto add = [&held](const std::shared_ptr<const Placement>& p, int64_t mine) {
    const int64_t holders = p.use_count() - mine;
    if (holders > 0) held[p->version] += holders;
  };
  auto it = models_.find(name);
  if (it != models_.end() && it->second.placement != nullptr) {
    add(it->second.placement, 1 + pins);
  }
  for (const auto& r : retired_) {
    if (r->model == name) add(r, 1);
  }
  return held;
}

absl::Status PlacementManager::StillAt(const std::string& name,
                                       const std::weak_ptr<const Placement>& at) const {
  const std::shared_ptr<const Placement>& current = models_.at(name).placement;
  const absl::Status moved = absl::AbortedError(
      absl::StrCat("model ", name, ": membership changed during the push; nothing changed"));
  // Same object, compared without taking a reference.
  if (current == nullptr || at.owner_before(current) || current.owner_before(at)) return moved;
  for (const auto& [id, address] : current->worker_addresses) {
    if (!registry_->IsAlive(id)) return moved;
  }
  return absl::OkStatus();
}

absl::Status PlacementManager::AwaitVersionRoom(const std::string& name,
                                                const std::weak_ptr<const Placement>& at,
                                                absl::Time deadline) {
  const int bound = options_.max_live_versions;
  const absl::Time start = absl::Now();
  bool waiting = false;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      absl::Status moved = StillAt(name, at);
      const std::map<int64_t, int64_t> held = HeldVersions(name, kPushPins);
      const bool room = static_cast<int>(held.size()) + 1 <= bound;
      if (!moved.ok() || room || absl::Now() >= deadline) {
        if (waiting) --models_.at(name).commits_waiting;
        if (!moved.ok() || room) return moved;
        std::vector<std::string> each;
        for (const auto& [version, holders] : held) {
          each.push_back(absl::StrCat("v", version, " by ", holders));
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "push to model '", name, "': its commit would make ", held.size() + 1,
            " weight versions live, over --max_live_versions=", bound,
            "; versions still held (by sequences or requests): ", absl::StrJoin(each, ", "),
            "; waited ", absl::FormatDuration(absl::Now() - start),
            " for the oldest to drain, until the push's deadline; nothing changed"));
      }
      if (!waiting) ++models_.at(name).commits_waiting;
      waiting = true;
    }
    // A release of a holder signals nothing: look again shortly.
    absl::SleepFor(std::min(absl::Milliseconds(5), deadline - absl::Now()));
  }
}

absl::Status PlacementManager::CommitVersion(const std::string& name,
                                             const std::weak_ptr<const Placement>& at,
                                             const std::function<absl::Status()>& commit,
                                             absl::Time deadline) {
  for (;;) {
    MS_RETURN_IF_ERROR(AwaitVersionRoom(name, at, deadline));
    // No placement happens between the check and the switch: PlaceModel runs
    // under control_mu_ too.
    absl::MutexLock control(&control_mu_);
    {
      absl::MutexLock lock(&mu_);
      MS_RETURN_IF_ERROR(StillAt(name, at));
      // A sequence started on a version since the wait: wait again.
      const int live = static_cast<int>(HeldVersions(name, kPushPins).size()) + 1;
      if (live > options_.max_live_versions) continue;
    }
    MS_RETURN_IF_ERROR(commit());
    absl::MutexLock lock(&mu_);
    ModelEntry& entry = models_.at(name);
    auto next = std::make_shared<Placement>(*entry.placement);
    next->version = entry.placement->version + 1;
    retired_.push_back(entry.placement);
    entry.placement = std::move(next);
    entry.pushed = true;
    MS_LOG(INFO) << "model '" << name << "' now serves version " << entry.placement->version
                 << " (generation " << entry.placement->generation << ")";
    return absl::OkStatus();
  }
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
    // Carried versions nothing holds any more (placement_manager.h).
    for (auto& [name, entry] : models_) {
      if (entry.placement == nullptr || entry.carried_versions.empty()) continue;
      const std::map<int64_t, int64_t> held = HeldVersions(name, 0);
      for (auto v = entry.carried_versions.begin(); v != entry.carried_versions.end();) {
        if (held.count(*v)) {
          ++v;
          continue;
        }
        auto carried = std::make_shared<Placement>(*entry.placement);
        carried->version = *v;
        done.push_back({std::move(carried), false});
        v = entry.carried_versions.erase(v);
      }
    }
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
