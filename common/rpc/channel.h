// Client channels and deadlines for meshserve's gRPC links (client ->
// coordinator, coordinator -> worker, worker -> worker, worker -> coordinator).
//
// Every channel raises the message size limits (tensors travel as raw bytes in
// single messages: default 1 GiB each way) and lowers the reconnect backoff
// (a restarted peer is reached again within ~100-500 ms instead of gRPC's
// default 1-120 s exponential backoff).
//
// Thread-safety: pure functions; channels are thread-safe.
#ifndef MESHSERVE_COMMON_RPC_CHANNEL_H_
#define MESHSERVE_COMMON_RPC_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace meshserve {

struct ChannelOptions {
  int64_t max_message_bytes = int64_t{1} << 30;  // send and receive
  int initial_reconnect_backoff_ms = 100;
  int min_reconnect_backoff_ms = 100;
  int max_reconnect_backoff_ms = 500;
  int keepalive_time_ms = 0;  // 0: gRPC's default (off)
  // Transport security (grpc_credentials.h, RpcSecurity): null is insecure.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name the server's certificate must carry instead of the
  // target's host (cluster channels: kMemberServerName). Empty: the host.
  std::string server_name_override;
  // Non-empty: every call carries "authorization: Bearer <token>".
  std::string bearer_token;
};

// The channel arguments above (exposed for tests and custom channels).
grpc::ChannelArguments MakeChannelArguments(const ChannelOptions& options = {});

// A channel to "host:port" with those arguments, `options.credentials` (null:
// insecure) and the bearer token on every call.
// \error kInvalidArgument when `target` is empty or has no port
//   ("localhost", ":", "host:" and "host:abc" are rejected, naming the target).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    absl::string_view target, const ChannelOptions& options = {});

// Validates "host:port" (port 1..65535; IPv6 hosts in brackets).
// \error kInvalidArgument naming `target`.
absl::Status ValidateTarget(absl::string_view target);

// Raises a ServerBuilder's max message sizes to `max_message_bytes`.
void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            int64_t max_message_bytes = int64_t{1} << 30);

// Deadlines. A non-positive or infinite timeout sets no deadline.
std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout);
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout);
// An absolute deadline; absl::InfiniteFuture() sets none.
void SetDeadlineAt(grpc::ClientContext* context, absl::Time deadline);
// Time left until `context`'s deadline (absl::InfiniteDuration() when none;
// zero when past).
absl::Duration TimeLeft(const grpc::ClientContext& context);
absl::Duration TimeLeftUntil(std::chrono::system_clock::time_point deadline);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_CHANNEL_H_
