// Limits on what a client may send, checked at the client edges (gRPC
// ModelInfer, REST infer) before a request reaches the coordinator:
//   max_request_bytes    one request message or REST body (gRPC enforces it as
//                        the server's max receive size: RESOURCE_EXHAUSTED;
//                        REST answers 413);
//   max_tensor_elements  elements of one input tensor (product of its shape).
// The defaults admit every model in examples/ at large batches and stop the
// 512 MiB request that was accepted before limits existed.
//
// Thread-safety: plain values and a pure function.
#ifndef MESHSERVE_SERVER_COORDINATOR_REQUEST_LIMITS_H_
#define MESHSERVE_SERVER_COORDINATOR_REQUEST_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/coordinator/infer_request.h"

namespace meshserve {

struct RequestLimits {
  int64_t max_request_bytes = int64_t{256} << 20;    // 256 MiB
  int64_t max_tensor_elements = int64_t{64} << 20;  // 64 Mi elements
};

// \error kInvalidArgument when a limit is not positive (naming the flag).
absl::Status ValidateRequestLimits(const RequestLimits& limits);

// \error kResourceExhausted naming the model, the input, its element count
//   and the limit, e.g. "model 'linear' input 'x': 100000000 elements
//   (shape [10000, 10000]) exceed --max_tensor_elements=67108864"; the byte
//   size of one input's data over max_request_bytes likewise. A shape whose
//   product overflows counts as over the limit.
absl::Status CheckRequestLimits(const InferRequest& request, const RequestLimits& limits);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_REQUEST_LIMITS_H_
