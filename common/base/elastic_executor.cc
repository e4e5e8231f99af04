#include "common/base/elastic_executor.h"

#include <utility>

namespace meshserve {

ElasticExecutor& ElasticExecutor::Shared() {
  static ElasticExecutor* const shared = new ElasticExecutor();
  return *shared;
}

ElasticExecutor::~ElasticExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // Idle threads wake and exit; busy ones exit after their task.
    auto all_exited = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return threads_.empty(); };
    mu_.Await(absl::Condition(&all_exited));
  }
  JoinExited();
}

void ElasticExecutor::Schedule(std::function<void()> task) {
  JoinExited();
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  // Invariant: each queued task has its own idle thread about to take it.
  if (idle_ >= static_cast<int>(queue_.size())) return;
  const int64_t id = next_thread_id_++;
  // The new thread blocks on mu_ until this lock is released, so its entry
  // exists before it can retire.
  threads_.emplace(id, std::thread([this, id] { Loop(id); }));
}

void ElasticExecutor::Loop(int64_t thread_id) {
  while (std::function<void()> task = NextTask(thread_id)) {
    task();
  }
}

std::function<void()> ElasticExecutor::NextTask(int64_t thread_id) {
  absl::MutexLock lock(&mu_);
  ++idle_;
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_timeout);
  --idle_;
  if (!queue_.empty()) {
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    return task;
  }
  // Idle for idle_timeout, or stopping: retire. The thread returns right
  // after this, so joining it never waits for more than its exit.
  auto self = threads_.find(thread_id);
  exited_.push_back(std::move(self->second));
  threads_.erase(self);
  return nullptr;
}

void ElasticExecutor::JoinExited() {
  std::vector<std::thread> exited;
  {
    absl::MutexLock lock(&mu_);
    exited.swap(exited_);
  }
  for (std::thread& t : exited) t.join();
}

ElasticExecutor::Stats ElasticExecutor::stats() const {
  absl::MutexLock lock(&mu_);
  return {static_cast<int>(threads_.size()), idle_, next_thread_id_};
}

}  // namespace meshserve
