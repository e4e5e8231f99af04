// The one conversion point between absl::Status (our cores) and grpc::Status
// (the wire). Codes map one to one (both follow google.rpc.Code); messages are
// truncated to kMaxGrpcStatusMessageBytes so a huge error (e.g. one naming a
// long list of values) never exceeds HTTP/2 header limits.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_RPC_GRPC_STATUS_H_
#define MESHSERVE_COMMON_RPC_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace meshserve {

// gRPC carries the message in a trailer; keep it well under the usual 8 KiB
// header budget.
inline constexpr size_t kMaxGrpcStatusMessageBytes = 4096;

// Same code; the message truncated (with a "... [truncated N bytes]" suffix)
// when longer than kMaxGrpcStatusMessageBytes. OK -> grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Same code and message. OK -> absl::OkStatus().
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_GRPC_STATUS_H_
