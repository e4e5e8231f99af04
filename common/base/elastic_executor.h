// An executor for blocking calls that may wait for each other: every task
// starts at once, on an idle thread when one exists and on a new thread
// otherwise. No task ever waits in a queue behind busy threads.
//
// Why not a fixed pool. The coordinator fans a request out to its workers and
// each call blocks until its worker finishes. The workers wait for each
// other's data (a receive on one waits for a send on another), so a call
// returns only after all calls of its request have started. If a request's
// last call queued behind threads busy with its first calls, the request would
// deadlock. The thread count is therefore unbounded. The caller bounds it: at
// most (requests in flight) x (workers per request).
//
// Design.
//   - Schedule() hands the task to an idle thread if fewer tasks are queued
//     than threads are idle. Otherwise it starts a thread. Each queued task
//     therefore has its own idle thread that is about to take it.
//   - A thread that has been idle for options.idle_timeout exits. So steady
//     traffic creates no threads, and a burst's threads go away after it.
//   - An exiting thread moves its std::thread into exited_. The next
//     Schedule(), or the destructor, joins it. Only idle threads exit, so a
//     task never runs on a thread that will be joined while it runs.
//   - The destructor waits for the running tasks, then joins every thread.
//
// Thread-safety: thread-safe. Tasks may call Schedule() (nested fan-outs).
// Never destroy an executor from one of its own tasks, and never call
// Schedule() while it is being destroyed.
#ifndef MESHSERVE_COMMON_BASE_ELASTIC_EXECUTOR_H_
#define MESHSERVE_COMMON_BASE_ELASTIC_EXECUTOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {

class ElasticExecutor {
 public:
  struct Options {
    // An idle thread exits after this long without a task.
    absl::Duration idle_timeout = absl::Seconds(30);
  };

  ElasticExecutor() : ElasticExecutor(Options()) {}
  explicit ElasticExecutor(Options options) : options_(options) {}
  ~ElasticExecutor();
  ElasticExecutor(const ElasticExecutor&) = delete;
  ElasticExecutor& operator=(const ElasticExecutor&) = delete;

  // The process-wide executor (never destroyed).
  static ElasticExecutor& Shared();

  // Runs `task` now, on an idle thread or a new one.
  void Schedule(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int threads = 0;      // alive now
    int idle = 0;         // of those, waiting for a task
    int64_t started = 0;  // ever started
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(int64_t thread_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The next task for `thread_id`, or null when the thread should exit.
  std::function<void()> NextTask(int64_t thread_id) ABSL_LOCKS_EXCLUDED(mu_);
  void JoinExited() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::thread> threads_ ABSL_GUARDED_BY(mu_);  // by thread id
  std::vector<std::thread> exited_ ABSL_GUARDED_BY(mu_);         // to be joined
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_thread_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_ELASTIC_EXECUTOR_H_
