#include "common/base/deadline_timer.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace meshserve {
namespace {

// How long the thread sleeps with nothing due before looking again.
constexpr absl::Duration kIdleSleep = absl::Seconds(1);

}  // namespace

DeadlineTimer::DeadlineTimer() : thread_([this]() { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.Signal();
  }
  thread_.join();
}

DeadlineTimer::Id DeadlineTimer::Add(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  entries_.emplace(std::make_pair(when, id), std::move(fn));
  when_[id] = when;
  if (when < sleeps_until_) changed_.Signal();
  return id;
}

bool DeadlineTimer::Remove(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  entries_.erase(std::make_pair(it->second, id));
  when_.erase(it);
  return true;
}

int64_t DeadlineTimer::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

void DeadlineTimer::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time now = absl::Now();
    while (!entries_.empty() && entries_.begin()->first.first <= now) {
      auto node = entries_.extract(entries_.begin());
      when_.erase(node.key().second);
      std::function<void()> fn = std::move(node.mapped());
      mu_.Unlock();
      fn();
      mu_.Lock();
      if (stopping_) return;
      now = absl::Now();
    }
    sleeps_until_ = now + kIdleSleep;
    if (!entries_.empty()) sleeps_until_ = std::min(sleeps_until_, entries_.begin()->first.first);
    changed_.WaitWithDeadline(&mu_, sleeps_until_);
  }
}

}  // namespace meshserve
