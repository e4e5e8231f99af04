#include "common/rpc/call_gate.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace meshserve {

CallGate::Pass::~Pass() {
  if (gate_ == nullptr) return;
  absl::MutexLock lock(&gate_->mu_);
  --gate_->inside_;
}

absl::StatusOr<CallGate::Pass> CallGate::Enter() {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::UnavailableError(
        absl::StrCat(server_, " is stopping: retry the call (against its replacement)"));
  }
  ++inside_;
  return Pass(this);
}

void CallGate::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool CallGate::WaitUntilEmpty(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inside_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

int64_t CallGate::inside() const {
  absl::MutexLock lock(&mu_);
  return inside_;
}

}  // namespace meshserve
