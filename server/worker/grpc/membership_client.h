// Keeps a worker registered with the coordinator (MembershipService in
// proto/cluster_service.proto): Register, retried with backoff (100 ms doubling
// to 2 s) until the coordinator answers; then Heartbeat every
// heartbeat_interval (the coordinator's RegisterResponse value when it gives
// one, else 500 ms). A heartbeat answered with known=false re-registers with
// the previous worker id; failed heartbeats are retried at the same pace (the
// coordinator may be restarting). `on_registered` runs after every successful
// registration with the worker id. Stop(draining=true) sends one draining
// heartbeat (bounded by a 400 ms deadline) and stops the thread.
// DrainingHeartbeat, after Stop, sends one more: a leaving worker repeats it
// while the coordinator moves its models away.
//
// Warm-up (Options::warm_up set): the first Register says warms_up; when the
// coordinator answers warm_bytes > 0 (the bytes its next placement should put
// here), warm_up(warm_bytes) runs on its own thread (the worker touches that
// much of its tensor pool) while heartbeats say warm=false; when it returns
// (OK or not) one heartbeat says warm=true at once, and every later one
// does, so the coordinator places on this worker. A coordinator that sends
// no warm_bytes (an old one, or no model placed yet) gets a worker that
// registers and heartbeats as before.
//
// Thread-safety: Start/Stop from one thread; worker_id() and warming() from
// any.
#ifndef MESHSERVE_SERVER_WORKER_GRPC_MEMBERSHIP_CLIENT_H_
#define MESHSERVE_SERVER_WORKER_GRPC_MEMBERSHIP_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/rpc/channel.h"
#include "proto/cluster_service.grpc.pb.h"

namespace meshserve {

class MembershipClient {
 public:
  struct Options {
    std::string coordinator;  // host:port
    std::string address;      // this worker's advertised address
    int cores = 1;
    int64_t memory_bytes = 0;
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    // The coordinator channel (RpcSecurity::MemberChannelOptions with --tls_dir).
    ChannelOptions channel;
    // Touches `bytes` of memory the first placement will fill (see above);
    // null: no warm-up.
    std::function<absl::Status(int64_t bytes)> warm_up;
  };

  // \error kInvalidArgument for a bad coordinator target.
  static absl::StatusOr<std::unique_ptr<MembershipClient>> Create(
      Options options, std::function<void(int64_t worker_id)> on_registered);
  ~MembershipClient();

  void Start();
  void Stop(bool draining);
  // One draining heartbeat (400 ms deadline), after Stop. OK when the
  // coordinator answered and knows this worker.
  absl::Status DrainingHeartbeat();
  int64_t worker_id() const { return worker_id_.load(); }
  // The warm-up asked by the coordinator is running.
  bool warming() const { return warming_.load(); }

 private:
  MembershipClient(Options options, std::unique_ptr<MembershipService::Stub> stub,
                   std::function<void(int64_t)> on_registered);
  void Loop();
  // One Register attempt.
  absl::Status Register();
  // One heartbeat; sets *known.
  absl::Status Heartbeat(bool draining, bool* known);
  // Runs options_.warm_up(bytes) on warm_thread_, then the warm heartbeat.
  void StartWarmUp(int64_t bytes);

  const Options options_;
  std::unique_ptr<MembershipService::Stub> stub_;
  std::function<void(int64_t)> on_registered_;
  std::atomic<int64_t> worker_id_{-1};
  absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
  std::atomic<bool> warming_{false};
  bool warm_up_asked_ = false;  // on thread_ only
  std::thread warm_thread_;     // started on thread_, joined by Stop
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_MEMBERSHIP_CLIENT_H_
