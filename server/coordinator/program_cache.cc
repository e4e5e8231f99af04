// ProgramCache (program_cache.h): compile-and-install once per key, under an
// LRU bound.
#include "server/coordinator/program_cache.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {
namespace {

std::string CacheKey(const ValidatedRequest& v, const Placement& placement) {
  return absl::StrCat(placement.model, "|", placement.generation, "|", v.cache_key_suffix);
}

}  // namespace

ProgramCache::ProgramCache(ModelCompiler* compiler, WorkerClientFactory clients,
                           WorkerRegistry* registry, absl::Duration install_timeout,
                           ProgramCacheOptions options)
    : compiler_(compiler),
      clients_(std::move(clients)),
      registry_(registry),
      install_timeout_(install_timeout),
      options_(std::move(options)),
      programs_gauge_(options_.metrics == nullptr
                          ? nullptr
                          : &options_.metrics->AddGauge("meshserve_program_cache_programs",
                                                        "Installed plans the program cache "
                                                        "holds (bounded by "
                                                        "--max_cached_programs).")),
      evictions_counter_(options_.metrics == nullptr
                             ? nullptr
                             : &options_.metrics->AddCounter(
                                   "meshserve_program_cache_evictions_total",
                                   "Plans the program cache evicted (least recently used).")),
      compiles_counter_(options_.metrics == nullptr
                            ? nullptr
                            : &options_.metrics->AddCounter(
                                  "meshserve_program_cache_compiles_total",
                                  "Plans the program cache compiled and installed (misses).")) {
  if (programs_gauge_ != nullptr) programs_gauge_->Set({}, 0);
  if (evictions_counter_ != nullptr) evictions_counter_->Increment({}, 0);
  if (compiles_counter_ != nullptr) compiles_counter_->Increment({}, 0);
}

absl::Status ProgramCache::Install(const CompiledPlan& plan, const Placement& placement) {
  std::vector<int64_t> ids;
  for (const auto& [worker, program] : plan.programs) ids.push_back(worker);
  std::vector<absl::Status> results = ParallelCall(ids, [&](int64_t id) {
    auto addr = placement.worker_addresses.find(id);
    if (addr == placement.worker_addresses.end()) {
      return Internal("program for worker ", id, " outside the placement");
    }
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = clients_(id, addr->second);
    absl::Status result = client.ok() ? (*client)->InstallProgram(
                                            plan.programs.at(id), install_timeout_)
                                      : client.status();
    return AnnotateStatus(result, "InstallProgram on worker ", id);
  });
  for (size_t i = 0; i < ids.size(); ++i) {
    if (results[i].ok()) continue;
    if (IsWorkerFailure(results[i])) registry_->MarkSuspect(ids[i]);
    return IsWorkerFailure(results[i]) ? absl::UnavailableError(results[i].message())
                                       : results[i];
  }
  return absl::OkStatus();
}

std::string ProgramCache::ProgramIdFor(const Placement& placement, const std::string& suffix) {
  const std::string prefix = absl::StrCat(placement.model, "/g", placement.generation, "/");
  const std::string key = absl::StrCat(placement.model, "|", placement.generation, "|", suffix);
  std::string id = absl::StrCat(prefix, "p",
                                absl::Hex(std::hash<std::string>{}(suffix), absl::kZeroPad16));
  auto owner = key_of_id_.find(id);
  if (owner != key_of_id_.end() && owner->second != key) {  // a hash collision
    id = absl::StrCat(prefix, "q", next_program_++);
  }
  key_of_id_[id] = key;
  return id;
}

void ProgramCache::EraseSlot(std::map<std::string, Slot>::iterator it) {
  if (it->second.plan != nullptr) lru_.erase(it->second.lru);
  auto owner = key_of_id_.find(it->second.program_id);
  if (owner != key_of_id_.end() && owner->second == it->first) key_of_id_.erase(owner);
  cache_.erase(it);
}

void ProgramCache::UpdateGauge() {
  if (programs_gauge_ != nullptr) programs_gauge_->Set({}, static_cast<double>(lru_.size()));
}

std::vector<std::shared_ptr<const CompiledPlan>> ProgramCache::Insert(
    const std::string& key, const std::shared_ptr<CacheEntry>& entry,
    std::shared_ptr<const CompiledPlan> plan) {
  std::vector<std::shared_ptr<const CompiledPlan>> evicted;
  auto it = cache_.find(key);
  // Erased while it compiled (its generation retired): returned, not cached.
  if (it == cache_.end() || it->second.entry != entry) return evicted;
  it->second.plan = std::move(plan);
  it->second.lru = lru_.insert(lru_.begin(), key);
  const size_t bound = std::max<size_t>(options_.max_programs, 1);
  while (lru_.size() > bound) {
    auto victim = cache_.find(lru_.back());
    evicted.push_back(victim->second.plan);
    EraseSlot(victim);
    ++evictions_;
  }
  if (evictions_counter_ != nullptr && !evicted.empty()) {
    evictions_counter_->Increment({}, static_cast<double>(evicted.size()));
  }
  UpdateGauge();
  return evicted;
}

std::shared_ptr<const CompiledPlan> ProgramCache::Find(const ValidatedRequest& v,
                                                       const Placement& placement) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(CacheKey(v, placement));
  // Not installed yet (or compiling): a miss, not a wait.
  if (it == cache_.end() || it->second.plan == nullptr) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.plan;
}

absl::StatusOr<std::shared_ptr<const CompiledPlan>> ProgramCache::GetOrCompile(
    const ValidatedRequest& v, const std::shared_ptr<const Placement>& placement) {
  const std::string key = CacheKey(v, *placement);
  std::shared_ptr<CacheEntry> entry;
  std::string program_id;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = cache_.try_emplace(key);
    Slot& slot = it->second;
    if (slot.plan != nullptr) {  // a hit: most recently used now
      lru_.splice(lru_.begin(), lru_, slot.lru);
      return slot.plan;
    }
    if (inserted) {
      slot.entry = std::make_shared<CacheEntry>();
      slot.program_id = ProgramIdFor(*placement, v.cache_key_suffix);
    }
    entry = slot.entry;
    program_id = slot.program_id;
  }
  absl::MutexLock lock(&entry->mu);
  if (entry->done) return entry->plan;
  if (compiles_counter_ != nullptr) compiles_counter_->Increment({});
  CompileRequest request;
  request.model = v.model.get();
  request.devices = placement->Devices();
  request.input_shapes = v.shapes;
  request.out_shardings = v.out_specs;
  request.program_id = program_id;
  absl::Status status;
  absl::StatusOr<CompiledPlan> plan = compiler_->Compile(request);
  if (plan.ok()) {
    plan->generation = placement->generation;
    status = Install(*plan, *placement);
  } else {
    status = plan.status();
  }
  if (!status.ok()) {  // not cached: the next request tries again
    absl::MutexLock cache_lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.entry == entry) EraseSlot(it);
    return status;
  }
  entry->plan = std::make_shared<const CompiledPlan>(*std::move(plan));
  entry->done = true;
  std::vector<std::shared_ptr<const CompiledPlan>> evicted;
  {
    absl::MutexLock cache_lock(&mu_);
    evicted = Insert(key, entry, entry->plan);
  }
  if (options_.on_evict) {
    for (std::shared_ptr<const CompiledPlan>& gone : evicted) options_.on_evict(std::move(gone));
  }
  return entry->plan;
}

void ProgramCache::Forget(const CompiledPlan& plan) {
  absl::MutexLock lock(&mu_);
  auto owner = key_of_id_.find(plan.program_id);
  if (owner == key_of_id_.end()) return;
  auto it = cache_.find(owner->second);
  if (it == cache_.end() || it->second.plan.get() != &plan) return;  // gone or replaced
  EraseSlot(it);
  UpdateGauge();
}

bool ProgramCache::HasProgram(const std::string& program_id) const {
  absl::MutexLock lock(&mu_);
  return key_of_id_.count(program_id) > 0;
}

void ProgramCache::EraseGeneration(const std::string& model, int64_t generation) {
  const std::string prefix = absl::StrCat(model, "|", generation, "|");
  absl::MutexLock lock(&mu_);
  for (auto it = cache_.begin(); it != cache_.end();) {
    auto cur = it++;
    if (cur->first.rfind(prefix, 0) == 0) EraseSlot(cur);
  }
  UpdateGauge();
}

size_t ProgramCache::size() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

int64_t ProgramCache::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

}  // namespace meshserve
