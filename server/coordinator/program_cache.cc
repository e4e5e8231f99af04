#include "server/coordinator/program_cache.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {

ProgramCache::ProgramCache(ModelCompiler* compiler, WorkerClientFactory clients,
                           WorkerRegistry* registry, absl::Duration install_timeout)
    : compiler_(compiler),
      clients_(std::move(clients)),
      registry_(registry),
      install_timeout_(install_timeout) {}

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

namespace {

std::string CacheKey(const ValidatedRequest& v, const Placement& placement) {
  return absl::StrCat(placement.model, "|", placement.generation, "|", v.cache_key_suffix);
}

}  // namespace

std::shared_ptr<const CompiledPlan> ProgramCache::Find(const ValidatedRequest& v,
                                                       const Placement& placement) const {
  std::shared_ptr<CacheEntry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(CacheKey(v, placement));
    if (it == cache_.end()) return nullptr;
    entry = it->second;
  }
  // Held while the plan compiles and installs: a miss, not a wait.
  if (!entry->mu.TryLock()) return nullptr;
  std::shared_ptr<const CompiledPlan> plan = entry->done ? entry->plan : nullptr;
  entry->mu.Unlock();
  return plan;
}

absl::StatusOr<std::shared_ptr<const CompiledPlan>> ProgramCache::GetOrCompile(
    const ValidatedRequest& v, const std::shared_ptr<const Placement>& placement) {
  const std::string key = CacheKey(v, *placement);
  std::shared_ptr<CacheEntry> entry;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<CacheEntry>& slot = cache_[key];
    if (slot == nullptr) slot = std::make_shared<CacheEntry>();
    entry = slot;
  }
  absl::MutexLock lock(&entry->mu);
  if (entry->done) return entry->plan;
  CompileRequest request;
  request.model = v.model.get();
  request.devices = placement->Devices();
  request.input_shapes = v.shapes;
  request.out_shardings = v.out_specs;
  request.program_id = absl::StrCat(placement->model, "/g", placement->generation, "/p",
                                    next_program_.fetch_add(1));
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
    if (it != cache_.end() && it->second == entry) cache_.erase(it);
    return status;
  }
  entry->plan = std::make_shared<const CompiledPlan>(*std::move(plan));
  entry->done = true;
  return entry->plan;
}

void ProgramCache::EraseGeneration(const std::string& model, int64_t generation) {
  const std::string prefix = absl::StrCat(model, "|", generation, "|");
  absl::MutexLock lock(&mu_);
  for (auto it = cache_.begin(); it != cache_.end();) {
    it = it->first.rfind(prefix, 0) == 0 ? cache_.erase(it) : std::next(it);
  }
}

size_t ProgramCache::size() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

}  // namespace meshserve
