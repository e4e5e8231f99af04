// A small thread pool that grows on demand: the gRPC reactors hand the
// worker's blocking work (Execute runs GEMMs and waits on receives; LoadModel
// reads checkpoints) to it, so reactors never block.
//
// Growth: Schedule starts a new thread when no thread is idle and fewer than
// max_threads run; otherwise the task queues. Execute tasks may wait on each
// other across workers (a receive waits for a peer's send), so max_threads
// must exceed the number of requests in flight (default 256).
//
// Thread-safety: thread-safe. The destructor runs the queued tasks and joins.
#ifndef MESHSERVE_COMMON_BASE_THREAD_POOL_H_
#define MESHSERVE_COMMON_BASE_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace meshserve {

class ThreadPool {
 public:
  explicit ThreadPool(int max_threads = 256) : max_threads_(max_threads) {}
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task);
  int num_threads() const;

 private:
  void Loop();

  const int max_threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_THREAD_POOL_H_
