// Membership: the workers that registered with the coordinator, their
// addresses, health and draining flags.
//
// A worker registers (address, cores, memory, previous id) and gets an id; a
// worker re-registering with its previous id (or from the same address) keeps
// it. Heartbeats arrive every `heartbeat_interval`; a worker whose last beat
// is older than `missed_beats * heartbeat_interval` is dead. A worker can also
// be marked dead at once (e.g. after a failed probe) and comes back to life
// when it heartbeats or registers again. A draining worker stays alive (it may
// finish requests) but gets no new devices. A worker dead for longer than
// `forget_after` (since its last beat) that no placement uses any more is
// forgotten (it left, or
// its replacement took over), so a cluster that scales down does not list
// its departed workers for ever.
//
// A worker that registers `warming` (it is touching the pool memory its first
// placement will fill, proto/cluster_service.proto RegisterRequest.warms_up)
// is alive but not placeable until a heartbeat says warm or `warmup_wait`
// passes after its registration (ExpireDead then ends the wait), so a worker
// that never reports warm is placed anyway and nothing hangs.
//
// Every change to the set of live, non-draining workers bumps `epoch()`, so
// the coordinator's control loop knows when to compute new placements.
//
// Time is passed in explicitly (tests drive it; the coordinator passes
// absl::Now()).
//
// Thread-safety: thread-safe; every method takes the internal mutex.
#ifndef MESHSERVE_SERVER_COORDINATOR_WORKER_REGISTRY_H_
#define MESHSERVE_SERVER_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {

struct WorkerInfo {
  int64_t worker_id = -1;
  std::string address;
  int32_t cores = 0;
  int64_t memory_bytes = 0;
  bool alive = true;
  bool draining = false;
  bool suspect = false;  // a request saw it fail; the control loop probes it
  absl::Time last_heartbeat = absl::InfinitePast();
  absl::Time registered_at = absl::InfinitePast();
  // Registered with an id it had been given before (by this coordinator or
  // by one before a restart): it may hold shards.
  bool returning = false;
  // Registered warming; not placeable until warm or warmup_wait passed.
  bool warming = false;
};

class WorkerRegistry {
 public:
  WorkerRegistry(absl::Duration heartbeat_interval, int missed_beats)
      : heartbeat_interval_(heartbeat_interval), missed_beats_(missed_beats) {}

  // Returns the worker id. previous_worker_id < 0 means new; a known previous
  // id (or an address already registered) keeps its id.
  // \error kInvalidArgument for an empty address.
  // `warming`: see the file comment.
  absl::StatusOr<int64_t> Register(absl::string_view address, int32_t cores,
                                   int64_t memory_bytes, int64_t previous_worker_id,
                                   absl::Time now, bool warming = false);

  // False when the id is unknown (the worker must re-register). `warm` ends
  // the worker's warm-up (false leaves it as it is).
  bool Heartbeat(int64_t worker_id, bool draining, absl::Time now, bool warm = false);

  // Marks workers whose last beat is too old as dead; returns their ids.
  // Also ends the warm-up of workers registered warming more than
  // warmup_wait before `now`.
  std::vector<int64_t> ExpireDead(absl::Time now);

  // The bound on a warm-up (default 5 s; zero: warming workers are placed at
  // the next ExpireDead).
  void set_warmup_wait(absl::Duration wait);
  // Live, non-draining workers, warming ones included.
  int NumJoinedWorkers() const;

  // Forgets dead workers whose last beat is older than `now - after` and for which `in_use(id)` is
  // false; returns their ids. Does not change `epoch()` (dead workers were
  // never placement candidates).
  template <typename InUse>
  std::vector<int64_t> ForgetDead(absl::Time now, absl::Duration after, InUse in_use) {
    std::vector<int64_t> forgotten;
    absl::MutexLock lock(&mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      const WorkerInfo& info = it->second;
      if (!info.alive && now - info.last_heartbeat > after && !in_use(info.worker_id)) {
        forgotten.push_back(info.worker_id);
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    return forgotten;
  }

  // Marks a worker suspect (a request saw it fail) / dead (a probe failed).
  // False (nothing marked) for an unknown or dead worker.
  bool MarkSuspect(int64_t worker_id);
  void MarkDead(int64_t worker_id);
  void ClearSuspect(int64_t worker_id);

  // Live, non-draining, not warming workers, by id ascending (placement
  // candidates).
  std::vector<WorkerInfo> PlaceableWorkers() const;
  std::vector<WorkerInfo> AllWorkers() const;
  std::vector<int64_t> SuspectWorkers() const;
  // The newest registered_at of a live worker, and whether a live worker is
  // returning (WorkerInfo::returning).
  absl::Time LastRegistration() const;
  bool AnyReturning() const;
  bool IsAlive(int64_t worker_id) const;
  bool IsSuspect(int64_t worker_id) const;
  absl::StatusOr<WorkerInfo> Get(int64_t worker_id) const;

  int64_t epoch() const;
  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }

 private:
  void BumpEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++epoch_; }
  static bool Placeable(const WorkerInfo& info) {
    return info.alive && !info.draining && !info.warming;
  }

  const absl::Duration heartbeat_interval_;
  const int missed_beats_;
  mutable absl::Mutex mu_;
  std::map<int64_t, WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration warmup_wait_ ABSL_GUARDED_BY(mu_) = absl::Seconds(5);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WORKER_REGISTRY_H_
