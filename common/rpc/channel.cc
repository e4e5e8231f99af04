#include "common/rpc/channel.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/base/status_util.h"
#include "common/rpc/grpc_credentials.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace meshserve {
namespace {

int ClampToInt(int64_t v) {
  return static_cast<int>(std::min<int64_t>(
      std::max<int64_t>(v, 0), std::numeric_limits<int>::max()));
}

}  // namespace

grpc::ChannelArguments MakeChannelArguments(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(ClampToInt(options.max_message_bytes));
  args.SetMaxSendMessageSize(ClampToInt(options.max_message_bytes));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              options.initial_reconnect_backoff_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, options.min_reconnect_backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, options.max_reconnect_backoff_ms);
  if (!options.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.server_name_override);
  }
  if (options.keepalive_time_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  }
  return args;
}

absl::Status ValidateTarget(absl::string_view target) {
  if (target.empty()) return InvalidArgument("empty target: want host:port");
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return InvalidArgument("target '", target, "': want host:port");
  }
  absl::string_view host = target.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return InvalidArgument("target '", target, "': unterminated IPv6 host");
  }
  int port = 0;
  if (!absl::SimpleAtoi(target.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return InvalidArgument("target '", target, "': port '",
                           target.substr(colon + 1), "' is not in 1..65535");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    absl::string_view target, const ChannelOptions& options) {
  absl::Status valid = ValidateTarget(target);
  if (!valid.ok()) return valid;
  grpc::ChannelArguments args = MakeChannelArguments(options);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  if (options.bearer_token.empty()) {
    return grpc::CreateCustomChannel(std::string(target), credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(BearerTokenInterceptorFactory(options.bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      std::string(target), credentials, args, std::move(interceptors));
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            int64_t max_message_bytes) {
  builder->SetMaxReceiveMessageSize(ClampToInt(max_message_bytes));
  builder->SetMaxSendMessageSize(ClampToInt(max_message_bytes));
}

std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return std::chrono::system_clock::time_point::max();
  }
  return std::chrono::system_clock::now() + absl::ToChronoMicroseconds(timeout);
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) return;
  context->set_deadline(DeadlineFromNow(timeout));
}

void SetDeadlineAt(grpc::ClientContext* context, absl::Time deadline) {
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
}

absl::Duration TimeLeftUntil(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteDuration();
  }
  const auto now = std::chrono::system_clock::now();
  if (deadline <= now) return absl::ZeroDuration();
  return absl::FromChrono(
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
}

absl::Duration TimeLeft(const grpc::ClientContext& context) {
  return TimeLeftUntil(context.deadline());
}

}  // namespace meshserve
