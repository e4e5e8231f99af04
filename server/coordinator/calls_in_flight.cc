#include "server/coordinator/calls_in_flight.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace meshserve {
namespace {

// How often a request waiting for its workers checks the registry for a lost one.
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(50);

}  // namespace

CallsInFlight::CallsInFlight(size_t n) : results_(n), done_(n, false), remaining_(n) {}

void CallsInFlight::OnSettled(std::function<void()> on_settled) {
  {
    absl::MutexLock lock(&mu_);
    if (claimed_) return;
    if (!Settled()) {
      on_settled_ = std::move(on_settled);
      return;
    }
    claimed_ = true;
  }
  on_settled();
}

void CallsInFlight::Finish(size_t index, absl::StatusOr<ExecuteResult> result) {
  std::function<void()> settled;
  {
    absl::MutexLock lock(&mu_);
    if (!result.ok() && first_failed_ < 0) first_failed_ = static_cast<int>(index);
    results_[index] = std::move(result);
    done_[index] = true;
    --remaining_;
    if (!claimed_ && on_settled_ && Settled()) {
      claimed_ = true;
      settled = std::move(on_settled_);
      on_settled_ = nullptr;  // it holds the request, which holds *this
    }
  }
  if (settled) settled();
}

bool CallsInFlight::Claim() {
  absl::MutexLock lock(&mu_);
  if (claimed_) return false;
  claimed_ = true;
  on_settled_ = nullptr;
  return true;
}

bool CallsInFlight::AllOk() const {
  absl::MutexLock lock(&mu_);
  return remaining_ == 0 && first_failed_ < 0;
}

int CallsInFlight::Wait(const std::vector<int64_t>& ids, const WorkerRegistry& registry,
                        absl::FunctionRef<void(int64_t failed)> cancel_others,
                        int* first_failed, absl::Status* first_status) {
  int abandoned = -1;
  // A call given up before any failed is the cause: failures after it are
  // (mostly) the peers' answers to its cancellation (ABORTED "cancelled").
  bool abandoned_first = false;
  mu_.Lock();  // not a MutexLock: `cancel` releases it around the RPCs
  bool cancelled = false;
  auto cancel = [&](int64_t failed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    cancelled = true;
    mu_.Unlock();
    cancel_others(failed);
    mu_.Lock();
  };
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return remaining_ == 0 || (first_failed_ >= 0 && !cancelled);
  };
  while (remaining_ > 0) {
    if (first_failed_ >= 0 && !cancelled) {
      cancel(ids[first_failed_]);
      continue;
    }
    if (mu_.AwaitWithTimeout(absl::Condition(&settled), kWatchPeriod)) continue;
    for (size_t i = 0; i < ids.size() && abandoned < 0; ++i) {
      if (!done_[i] && (!registry.IsAlive(ids[i]) || registry.IsSuspect(ids[i]))) {
        abandoned = static_cast<int>(i);
      }
    }
    if (abandoned >= 0) {
      abandoned_first = first_failed_ < 0;
      if (!cancelled) cancel(ids[abandoned]);
      break;
    }
  }
  int cause = abandoned_first ? -1 : first_failed_;
  // A worker's ABORTED ("request cancelled") mostly answers a failure
  // elsewhere (its peer's, or the cancel that failure caused): when that
  // failure is in too, it is the cause (e.g. a peer's RESOURCE_EXHAUSTED,
  // which must reach the client as is, not as a retriable ABORTED).
  if (cause >= 0 && absl::IsAborted(results_[cause].status())) {
    for (size_t i = 0; i < results_.size(); ++i) {
      if (done_[i] && !results_[i].ok() && !absl::IsAborted(results_[i].status())) {
        cause = static_cast<int>(i);
        break;
      }
    }
  }
  *first_failed = cause;
  if (*first_failed >= 0) {
    *first_status = results_[*first_failed].status();
    // Every call may have returned before the wait saw the failure: the
    // others' requests may still hold state (e.g. slices from the failed one).
    if (!cancelled) cancel(ids[*first_failed]);
  }
  mu_.Unlock();
  return abandoned;
}

std::vector<absl::StatusOr<ExecuteResult>> CallsInFlight::TakeResults() {
  absl::MutexLock lock(&mu_);
  return std::move(results_);
}

}  // namespace meshserve
