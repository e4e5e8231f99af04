#include "server/worker/grpc/membership_client.h"

#include <algorithm>
#include <utility>

#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/client_context.h"

namespace meshserve {

absl::StatusOr<std::unique_ptr<MembershipClient>> MembershipClient::Create(
    Options options, std::function<void(int64_t)> on_registered) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      CreateChannel(options.coordinator, options.channel), "--coordinator");
  return std::unique_ptr<MembershipClient>(new MembershipClient(
      std::move(options), MembershipService::NewStub(channel), std::move(on_registered)));
}

MembershipClient::MembershipClient(Options options,
                                   std::unique_ptr<MembershipService::Stub> stub,
                                   std::function<void(int64_t)> on_registered)
    : options_(std::move(options)),
      stub_(std::move(stub)),
      on_registered_(std::move(on_registered)),
      interval_(options_.heartbeat_interval) {}

MembershipClient::~MembershipClient() {
  if (thread_.joinable()) Stop(false);
}

void MembershipClient::Start() { thread_ = std::thread([this]() { Loop(); }); }

void MembershipClient::Stop(bool draining) {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
  if (warm_thread_.joinable()) warm_thread_.join();  // bounded: one pass over the bytes
  if (draining && worker_id() >= 0) {
    bool known = false;
    absl::Status status = Heartbeat(/*draining=*/true, &known);
    if (!status.ok()) MS_LOG(WARNING) << "draining heartbeat failed: " << status;
  }
}

absl::Status MembershipClient::DrainingHeartbeat() {
  if (worker_id() < 0) return absl::FailedPreconditionError("not registered");
  bool known = false;
  MS_RETURN_IF_ERROR(Heartbeat(/*draining=*/true, &known));
  if (!known) return absl::NotFoundError("the coordinator does not know this worker");
  return absl::OkStatus();
}

absl::Status MembershipClient::Register() {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(2));
  RegisterRequest request;
  request.set_address(options_.address);
  request.set_cores(options_.cores);
  request.set_memory_bytes(options_.memory_bytes);
  request.set_previous_worker_id(worker_id());
  // Only a fresh worker warms up (a re-registering one may hold shards).
  request.set_warms_up(options_.warm_up != nullptr && !warm_up_asked_ && worker_id() < 0);
  RegisterResponse response;
  MS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Register(&context, request, &response)));
  worker_id_.store(response.worker_id());
  if (response.heartbeat_interval_ms() > 0) {
    interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  if (request.warms_up() && response.warm_bytes() > 0) StartWarmUp(response.warm_bytes());
  if (on_registered_) on_registered_(response.worker_id());
  return absl::OkStatus();
}

void MembershipClient::StartWarmUp(int64_t bytes) {
  warm_up_asked_ = true;
  warming_.store(true);
  warm_thread_ = std::thread([this, bytes]() {
    const absl::Time start = absl::Now();
    absl::Status status = options_.warm_up(bytes);
    warming_.store(false);
    if (status.ok()) {
      MS_LOG(INFO) << "warmed " << (bytes >> 20) << " MiB of tensor memory in "
                   << absl::FormatDuration(absl::Now() - start);
    } else {
      MS_LOG(WARNING) << "warm-up of " << bytes << " bytes failed: " << status;
    }
    bool known = false;  // tell the coordinator now, not at the next beat
    if (absl::Status s = Heartbeat(false, &known); !s.ok()) {
      MS_LOG(INFO) << "warm heartbeat failed (the next one says it): " << s;
    }
  });
}

absl::Status MembershipClient::Heartbeat(bool draining, bool* known) {
  grpc::ClientContext context;
  // Short: a heartbeat must not hold up shutdown (SIGTERM exits within ~1 s).
  SetDeadline(&context, absl::Milliseconds(draining ? 400 : 500));
  HeartbeatRequest request;
  request.set_worker_id(worker_id());
  request.set_draining(draining);
  request.set_warm(!warming_.load());
  HeartbeatResponse response;
  MS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Heartbeat(&context, request, &response)));
  *known = response.known();
  return absl::OkStatus();
}

void MembershipClient::Loop() {
  absl::Duration backoff = absl::Milliseconds(100);
  bool registered = false;
  int64_t failures = 0;
  while (!stop_.HasBeenNotified()) {
    if (!registered) {
      absl::Status status = Register();
      if (status.ok()) {
        registered = true;
        backoff = absl::Milliseconds(100);
        continue;
      }
      if (++failures % 20 == 1) {
        MS_LOG(INFO) << "waiting for coordinator " << options_.coordinator << ": " << status;
      }
      stop_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    stop_.WaitForNotificationWithTimeout(interval_);
    if (stop_.HasBeenNotified()) break;
    bool known = true;
    absl::Status status = Heartbeat(false, &known);
    if (status.ok() && !known) {
      MS_LOG(INFO) << "coordinator forgot worker " << worker_id() << ": re-registering";
      registered = false;
    }
  }
}

}  // namespace meshserve
