#include "server/worker/send_tracker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace meshserve {

void SendTracker::Started() {
  absl::MutexLock lock(&mu_);
  ++outstanding_;
}

void SendTracker::Done(absl::Status status) {
  Callback fire;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    --outstanding_;
    if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
    if (when_done_ && (outstanding_ == 0 || !first_error_.ok())) {
      fire = std::move(when_done_);
      when_done_ = nullptr;
      result = first_error_;
    }
  }
  if (fire) fire(std::move(result));
}

absl::Status SendTracker::first_error() {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

void SendTracker::WhenDone(absl::Time deadline, Callback done) {
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    if (outstanding_ > 0 && first_error_.ok()) {
      if (absl::Now() < deadline) {
        when_done_ = std::move(done);
        return;
      }
      result = DeadlineLocked();
    } else {
      result = first_error_;
    }
  }
  done(std::move(result));
}

void SendTracker::Expire() {
  Callback fire;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    if (!when_done_) return;
    fire = std::move(when_done_);
    when_done_ = nullptr;
    result = DeadlineLocked();
  }
  fire(std::move(result));
}

absl::Status SendTracker::DeadlineLocked() {
  return absl::DeadlineExceededError(
      absl::StrCat(outstanding_, " sends still in flight at the deadline"));
}

}  // namespace meshserve
