// A server's count of the calls inside its handlers, for a stop that fails
// no call with a status clients do not retry. Close() makes every later
// Enter() refuse with kUnavailable (clients retry it, against the
// replacement); WaitUntilEmpty() waits for the calls already admitted to end.
// A process that then exits without grpc::Server::Shutdown closes its
// connections under its clients (kUnavailable again): Shutdown itself
// cancels the calls that reach the server while it runs, and a client sees
// those as CANCELLED, which neither gRPC nor a user retries.
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_COMMON_RPC_CALL_GATE_H_
#define MESHSERVE_COMMON_RPC_CALL_GATE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {

class CallGate {
 public:
  // An admitted call; the gate counts it until the pass is destroyed.
  class Pass {
   public:
    Pass(Pass&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Pass& operator=(Pass&&) = delete;
    Pass(const Pass&) = delete;
    ~Pass();

   private:
    friend class CallGate;
    explicit Pass(CallGate* gate) : gate_(gate) {}
    CallGate* gate_;
  };

  // `server` names the server in the refusal ("coordinator").
  explicit CallGate(std::string server) : server_(std::move(server)) {}
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // \error kUnavailable "<server> is stopping ..." once Close() was called.
  absl::StatusOr<Pass> Enter();
  void Close();
  // True when no admitted call is left; false when `timeout` passed first.
  bool WaitUntilEmpty(absl::Duration timeout);
  int64_t inside() const;

 private:
  const std::string server_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t inside_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_CALL_GATE_H_
