// KServe v2 / Open Inference Protocol: inference.GRPCInferenceService over
// the Coordinator (../shared/design/open-inference-protocol.md).
//
// ModelInfer takes inputs as raw_input_contents (one entry per input, in
// order; BF16/FP16 only this way) or typed contents (fp32_contents for FP32,
// int_contents for INT32/INT8, int64_contents for INT64, fp64_contents for
// FP64, bool_contents for BOOL, uint_contents for UINT8); a requested output's
// string parameter "out_sharding" (JAX syntax, "P('fsdp', None, 'model')")
// sets the layout the output is computed into. Outputs come back as
// raw_output_contents, with parameters "type" (the JAX type string) and
// "generation".
//
// ModelInfer uses gRPC's callback API (Coordinator::InferAsync): a request
// holds no thread while its workers run, and the last worker's answer
// finishes the call. The other methods are synchronous.
//
// Thread-safety: thread-safe (the Coordinator is).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_INFERENCE_SERVICE_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_INFERENCE_SERVICE_H_

#include <chrono>

#include "absl/status/statusor.h"
#include "common/rpc/call_gate.h"
#include "proto/inference.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/grpc/edge_auth.h"

namespace meshserve {

// Request proto -> core request; raw_input_contents' bytes are moved out of
// *proto, not copied. \error kInvalidArgument naming the value (unknown
// datatype, raw and typed contents mixed, raw count mismatch, a non-string
// out_sharding, missing data).
absl::StatusOr<InferRequest> InferRequestFromProto(inference::ModelInferRequest* proto);
void InferResponseToProto(InferResponse response, inference::ModelInferResponse* proto);

class InferenceService final
    : public inference::GRPCInferenceService::WithCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::Service> {
 public:
  // `gate` (call_gate.h) and `edge` (who may call, limits: edge_auth.h) must
  // outlive the service.
  explicit InferenceService(Coordinator* coordinator, CallGate* gate,
                            const EdgeOptions* edge = &DefaultEdgeOptions())
      : coordinator_(coordinator), gate_(gate), edge_(*edge) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse*) override;
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse*) override;
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest*,
                          inference::ModelReadyResponse*) override;
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse*) override;
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest*,
                             inference::ModelMetadataResponse*) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;

 private:
  // `core` within the edge's limits, with the call's deadline as its timeout.
  // \error kInvalidArgument / kResourceExhausted (request_limits.h),
  //   kDeadlineExceeded when the deadline has passed.
  absl::StatusOr<InferRequest> CheckedForCoordinator(
      InferRequest core, std::chrono::system_clock::time_point deadline) const;

  Coordinator* const coordinator_;
  CallGate* const gate_;  // admits each call (call_gate.h)
  const EdgeOptions& edge_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_INFERENCE_SERVICE_H_
