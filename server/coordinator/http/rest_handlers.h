// KServe v2 / Open Inference Protocol over HTTP/REST: the JSON <-> core
// conversions and the handlers (parse -> Coordinator -> reply), kept free of
// sockets so they are unit-tested directly; http_server.cc only routes.
//
//   POST /v2/models/swiglu/infer
//   {"id": "r1",
//    "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
//                "data": [1, 2, 3, 4, 5, 6]}],          (flat or nested, row-major)
//    "outputs": [{"name": "y", "parameters": {"out_sharding": "P('data', None)"}}]}
//   -> {"model_name": "swiglu", "model_version": "1", "id": "r1",
//       "outputs": [{"name": "y", "datatype": "FP32", "shape": [2, 3],
//                    "parameters": {"type": "float32[2@data,3]", "generation": 1},
//                    "data": [...]}]}                      (flat, row-major)
//
// Datatypes: FP32, FP64, BF16 and FP16 (JSON numbers, rounded to the type),
// INT8, UINT8, INT32, INT64 (JSON integers in range), BOOL (true/false).
// Errors: the protocol's {"error": "<message>"} with the HTTP status of the
// status code (HttpStatusFor). Health: 200 for true, 400 for false, as the
// protocol's REST health API says ("a 4xx status code indicates false").
//
// Thread-safety: the functions are pure; RestHandlers is thread-safe (the
// Coordinator is).
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_REST_HANDLERS_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_REST_HANDLERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/request_limits.h"

namespace meshserve {

// An HTTP answer: status and a JSON body.
struct HttpReply {
  int status = 200;
  std::string body;
};

// 400 INVALID_ARGUMENT/OUT_OF_RANGE, 404 NOT_FOUND, 412 FAILED_PRECONDITION,
// 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, 409 ALREADY_EXISTS/ABORTED,
// 429 RESOURCE_EXHAUSTED, 501 UNIMPLEMENTED, 401/403 auth, 500 otherwise.
int HttpStatusFor(absl::StatusCode code);
// {"error": message} with HttpStatusFor(status.code()).
HttpReply ErrorReply(const absl::Status& status);

// The request body -> core request for `model`. \error kInvalidArgument naming
// the value (malformed JSON, missing or mistyped fields, a datatype that is
// not supported, data that does not fit the datatype).
absl::StatusOr<InferRequest> InferRequestFromJson(absl::string_view model,
                                                  absl::string_view body);
std::string InferResponseToJson(const InferResponse& response);

class RestHandlers {
 public:
  explicit RestHandlers(Coordinator* coordinator, RequestLimits limits = {})
      : coordinator_(coordinator), limits_(limits) {}

  HttpReply Live() const;
  HttpReply Ready() const;
  HttpReply ServerMetadata() const;
  HttpReply ModelMetadata(const std::string& model) const;
  HttpReply ModelReady(const std::string& model) const;
  // A request over the limits (request_limits.h) gets 413 naming the limit.
  HttpReply Infer(const std::string& model, absl::string_view body) const;

 private:
  Coordinator* const coordinator_;
  const RequestLimits limits_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_REST_HANDLERS_H_
