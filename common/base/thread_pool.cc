#include "common/base/thread_pool.h"

#include <utility>

namespace meshserve {

ThreadPool::~ThreadPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads = std::move(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  if (idle_ < static_cast<int>(queue_.size()) &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this]() { Loop(); });
  }
}

int ThreadPool::num_threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void ThreadPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      --idle_;
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace meshserve
