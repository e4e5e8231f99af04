// DeadlineTimer: runs callbacks at their deadlines, on one thread of its own.
//
// A request's run on a worker (server/worker/program_run.cc) does not hold a
// thread while it waits for a peer's slice; the timer is what ends such a
// wait at the request's deadline. The coordinator's requests that wait for
// their workers without a thread (server/coordinator/coordinator_infer_async.cc)
// use one to look for lost workers when the wait grows long. A run adds one entry when it starts and removes it when
// it ends, so most entries are removed long before they are due. The thread
// sleeps until the earliest entry (at most a second when there is none) and
// is woken only by an entry earlier than the time it sleeps until: adding a
// request's entry, with a deadline of seconds, usually wakes nothing.
//
// Thread-safety: thread-safe. A callback runs with no lock held; it must not
// block for long (it delays the callbacks behind it). The destructor joins
// the thread; entries still pending are dropped, not run.
#ifndef MESHSERVE_COMMON_BASE_DEADLINE_TIMER_H_
#define MESHSERVE_COMMON_BASE_DEADLINE_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {

class DeadlineTimer {
 public:
  using Id = int64_t;

  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `fn` once at `when` (soon, when it has passed) unless removed first.
  Id Add(absl::Time when, std::function<void()> fn);
  // Removes the entry; true when it had not run (and now never runs).
  bool Remove(Id id);
  // Entries waiting to run (tests).
  int64_t size() const;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::pair<absl::Time, Id>, std::function<void()>> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Id, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time sleeps_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_DEADLINE_TIMER_H_
