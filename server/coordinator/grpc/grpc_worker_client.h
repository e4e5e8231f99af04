// WorkerClient over gRPC (meshserve.WorkerService), one channel per worker
// with common/rpc's settings (1 GiB messages, ~100-500 ms reconnect backoff).
//
// This header (and its .cc) must not include the core sharding/dtype headers:
// see worker_client.h.
//
// Thread-safety: thread-safe (gRPC stubs are).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_

#include <memory>
#include <string>

#include "server/coordinator/worker_client.h"

namespace meshserve {

// \error kInvalidArgument for a malformed address.
absl::StatusOr<std::shared_ptr<WorkerClient>> CreateGrpcWorkerClient(
    const std::string& address);

// A factory creating GrpcWorkerClients (the coordinator caches them).
WorkerClientFactory GrpcWorkerClientFactory();

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_GRPC_WORKER_CLIENT_H_
