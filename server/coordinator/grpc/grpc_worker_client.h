// WorkerClient over gRPC (meshserve.WorkerService), one channel per worker
// with common/rpc's settings (1 GiB messages, ~100-500 ms reconnect backoff)
// and the channel options given (with --tls_dir the member identity:
// RpcSecurity::MemberChannelOptions).
//
// This header (and its .cc) must not include the core sharding/dtype headers:
// see worker_client.h.
//
// Thread-safety: thread-safe (gRPC stubs are).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_

#include <memory>
#include <string>

#include "common/rpc/channel.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// \error kInvalidArgument for a malformed address.
absl::StatusOr<std::shared_ptr<WorkerClient>> CreateGrpcWorkerClient(
    const std::string& address, const ChannelOptions& options = {});

// A factory creating GrpcWorkerClients (the coordinator caches them).
WorkerClientFactory GrpcWorkerClientFactory(ChannelOptions options = {});

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_
