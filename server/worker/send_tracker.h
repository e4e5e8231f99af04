// SendTracker: the sends of one request's run in flight (program_run.cc).
//
// Each SendStep the run hands to its PeerTransport counts as started; the
// transport's `done` callback (which may outlive the run, and so shares the
// tracker) counts it as done and keeps the first failure. When the run has
// no steps left, WhenDone calls back once no send is in flight, or with the
// first send error, or at the request's deadline (Expire, from the run's
// deadline timer): the run never holds a thread to wait for its sends.
//
// Thread-safety: thread-safe; callbacks run with no lock held.
#ifndef MESHSERVE_SERVER_WORKER_SEND_TRACKER_H_
#define MESHSERVE_SERVER_WORKER_SEND_TRACKER_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {

class SendTracker {
 public:
  using Callback = std::function<void(absl::Status)>;

  void Started();
  void Done(absl::Status status);
  absl::Status first_error();
  // Calls `done` once: with OK when no send is in flight, the first send
  // error, or kDeadlineExceeded past `deadline` (at once, or from Expire).
  void WhenDone(absl::Time deadline, Callback done);
  // The deadline passed: a WhenDone still waiting gets kDeadlineExceeded.
  void Expire();

 private:
  absl::Status DeadlineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  Callback when_done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_SEND_TRACKER_H_
