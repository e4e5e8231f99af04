#include "server/coordinator/worker_registry.h"

#include <algorithm>

#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::StatusOr<int64_t> WorkerRegistry::Register(absl::string_view address,
                                                 int32_t cores,
                                                 int64_t memory_bytes,
                                                 int64_t previous_worker_id,
                                                 absl::Time now, bool warming) {
  if (address.empty()) {
    return InvalidArgument("Register: empty worker address");
  }
  absl::MutexLock lock(&mu_);
  int64_t id = -1;
  if (previous_worker_id >= 0) {
    auto it = workers_.find(previous_worker_id);
    if (it != workers_.end() && it->second.address == address) id = it->first;
  }
  if (id < 0) {
    for (const auto& [wid, info] : workers_) {
      if (info.address == address) id = wid;
    }
  }
  if (id < 0 && previous_worker_id >= 0 && !workers_.count(previous_worker_id)) {
    id = previous_worker_id;  // a coordinator restart: adopt the worker's id
  }
  if (id < 0) id = next_id_;
  next_id_ = std::max(next_id_, id + 1);
  WorkerInfo& info = workers_[id];
  const bool was_placeable = info.worker_id >= 0 && Placeable(info);
  const bool changed_address = info.address != address;
  info.worker_id = id;
  info.address = std::string(address);
  info.cores = cores;
  info.memory_bytes = memory_bytes;
  info.alive = true;
  info.draining = false;
  info.suspect = false;
  info.last_heartbeat = now;
  info.registered_at = now;
  info.returning = previous_worker_id >= 0 && id == previous_worker_id;
  info.warming = warming;
  if (was_placeable != Placeable(info) || changed_address) BumpEpochLocked();
  MS_LOG(INFO) << "worker " << id << " registered from " << address
               << (warming ? " (warming its pool)" : "");
  return id;
}

bool WorkerRegistry::Heartbeat(int64_t worker_id, bool draining, absl::Time now,
                               bool warm) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return false;
  WorkerInfo& info = it->second;
  const bool was_placeable = Placeable(info);
  info.last_heartbeat = now;
  info.alive = true;
  info.suspect = false;
  info.draining = draining;
  if (warm && info.warming) {
    info.warming = false;
    MS_LOG(INFO) << "worker " << worker_id << " warm after "
                 << absl::FormatDuration(now - info.registered_at);
  }
  if (was_placeable != Placeable(info)) BumpEpochLocked();
  return true;
}

void WorkerRegistry::set_warmup_wait(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  warmup_wait_ = wait;
}

int WorkerRegistry::NumJoinedWorkers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, info] : workers_) n += info.alive && !info.draining ? 1 : 0;
  return n;
}

std::vector<int64_t> WorkerRegistry::ExpireDead(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> dead;
  const absl::Duration limit = heartbeat_interval_ * missed_beats_;
  for (auto& [id, info] : workers_) {
    if (info.warming && now - info.registered_at >= warmup_wait_) {
      info.warming = false;
      if (Placeable(info)) BumpEpochLocked();
      MS_LOG(WARNING) << "worker " << id << " (" << info.address << ") not warm after "
                      << absl::FormatDuration(warmup_wait_) << ": placed anyway";
    }
    if (info.alive && now - info.last_heartbeat > limit) {
      info.alive = false;
      dead.push_back(id);
      MS_LOG(WARNING) << "worker " << id << " (" << info.address << ") missed "
                      << missed_beats_ << " heartbeats: dead";
    }
  }
  if (!dead.empty()) BumpEpochLocked();
  return dead;
}

bool WorkerRegistry::MarkSuspect(int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || !it->second.alive) return false;
  it->second.suspect = true;
  return true;
}

void WorkerRegistry::ClearSuspect(int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.suspect = false;
}

void WorkerRegistry::MarkDead(int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || !it->second.alive) return;
  it->second.alive = false;
  it->second.suspect = false;
  MS_LOG(WARNING) << "worker " << worker_id << " (" << it->second.address
                  << ") marked dead";
  BumpEpochLocked();
}

std::vector<WorkerInfo> WorkerRegistry::PlaceableWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const auto& [id, info] : workers_) {
    if (Placeable(info)) out.push_back(info);
  }
  return out;
}

std::vector<WorkerInfo> WorkerRegistry::AllWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const auto& [id, info] : workers_) out.push_back(info);
  return out;
}

std::vector<int64_t> WorkerRegistry::SuspectWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> out;
  for (const auto& [id, info] : workers_) {
    if (info.alive && info.suspect) out.push_back(id);
  }
  return out;
}

absl::Time WorkerRegistry::LastRegistration() const {
  absl::MutexLock lock(&mu_);
  absl::Time last = absl::InfinitePast();
  for (const auto& [id, info] : workers_) {
    if (info.alive) last = std::max(last, info.registered_at);
  }
  return last;
}

bool WorkerRegistry::AnyReturning() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, info] : workers_) {
    if (info.alive && info.returning) return true;
  }
  return false;
}

bool WorkerRegistry::IsAlive(int64_t worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.alive;
}

bool WorkerRegistry::IsSuspect(int64_t worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.suspect;
}

absl::StatusOr<WorkerInfo> WorkerRegistry::Get(int64_t worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return NotFound("unknown worker id ", worker_id);
  return it->second;
}

int64_t WorkerRegistry::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

}  // namespace meshserve
