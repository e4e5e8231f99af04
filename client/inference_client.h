// A client for a meshserve coordinator: KServe v2 inference
// (inference.GRPCInferenceService) plus meshserve's ClusterService
// (Describe, Status).
//
// Tensors travel as raw little-endian row-major bytes (`raw_input_contents`
// in the request; `raw_output_contents`, or typed `fp32_contents` /
// `int_contents` from other servers, in the response). A per-output
// `out_sharding` is sent as the requested output's string parameter
// "out_sharding" in JAX syntax ("P('fsdp', None, 'model')"); because KServe
// returns only the requested outputs when any is requested, the client then
// requests every output the model's metadata lists (cached per model).
//
// Errors: every gRPC failure comes back as an absl::Status with the same code
// and the server's message, prefixed by the RPC and target
// ("ModelInfer on 127.0.0.1:8500: <server message>"). Client-side checks
// (a byte length that does not match dtype x shape, a reply that is
// inconsistent) are kInvalidArgument / kInternal naming the value.
//
// Thread-safety: an InferenceClient may be used from many threads at once
// (gRPC stubs are thread-safe; the metadata cache is guarded by a mutex).
#ifndef MESHSERVE_CLIENT_INFERENCE_CLIENT_H_
#define MESHSERVE_CLIENT_INFERENCE_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/tensor/named_tensor.h"
#include "grpcpp/security/credentials.h"
#include "proto/cluster_service.grpc.pb.h"
#include "proto/inference.grpc.pb.h"

namespace meshserve {
namespace client {

// One output of a request: its tensor and the string parameters the server
// attached to it (meshserve adds "type", the JAX type string, and
// "visualization").
struct InferOutput {
  NamedTensor tensor;
  std::map<std::string, std::string> parameters;
};

struct InferResult {
  std::string model;
  std::string id;
  std::vector<InferOutput> outputs;  // in the server's order
  // A batched model's response parameters "batch_size" (rows of the execution
  // the request was part of) and "queue_us" (time queued); 0 when absent.
  int64_t batch_size = 0;
  int64_t queue_us = 0;
};

class InferenceClient {
 public:
  struct Options {
    // Max gRPC message size in both directions (inputs can be large).
    int64_t max_message_bytes = int64_t{1} << 30;
    // Reconnect backoff: low, so that a restarted server is found quickly.
    int reconnect_backoff_ms = 200;
    // TLS (common/rpc/grpc_credentials.h; client/client_connect.h makes them
    // from the CLI's flags): null is insecure.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::string server_name_override;  // the name the server's certificate carries
    std::string bearer_token;          // non-empty: sent on every call
  };

  // Opens a channel to `target` ("host:port"). Does not connect
  // yet (gRPC connects lazily); use WaitReady to wait for the server.
  // \error kInvalidArgument when `target` is not "host:port" (naming it).
  static absl::StatusOr<std::unique_ptr<InferenceClient>> Create(
      absl::string_view target, const Options& options);
  static absl::StatusOr<std::unique_ptr<InferenceClient>> Create(
      absl::string_view target) {
    return Create(target, Options());
  }

  const std::string& target() const { return target_; }

  // Runs `model` on `inputs`. `out_shardings` maps an output name to a spec in
  // JAX syntax. Each request gets an id ("<pid>-<counter>") echoed back.
  // \error the server's status (code kept); kInvalidArgument for an input
  //   whose bytes do not match its shape; kInternal for a reply whose raw
  //   contents do not match its outputs.
  absl::StatusOr<InferResult> Infer(
      absl::string_view model, absl::Span<const NamedTensor> inputs,
      const std::map<std::string, std::string>& out_shardings,
      absl::Time deadline);
  // Same, moving the inputs' bytes into the request instead of copying them
  // (the inputs keep their names, dtypes and shapes, not their bytes); the
  // bytes go out as they are, with no copy into the message or gRPC's buffers.
  absl::StatusOr<InferResult> InferMovingInputs(
      absl::string_view model, absl::Span<NamedTensor> inputs,
      const std::map<std::string, std::string>& out_shardings, absl::Time deadline);

  // KServe model metadata (inputs/outputs with datatypes and shapes).
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
      absl::string_view model, absl::Time deadline);

  // Every value of `model` typed at `input_shapes` (name -> dims).
  absl::StatusOr<DescribeResponse> Describe(
      absl::string_view model,
      const std::map<std::string, std::vector<int64_t>>& input_shapes,
      absl::Time deadline);

  absl::StatusOr<ClusterStatusResponse> Status(absl::Time deadline);

  // The ClusterService stub on this client's channel, for the streaming RPCs
  // of client/params_client.h (PushParams, PullParams).
  ClusterService::Stub& cluster_stub() { return *cluster_stub_; }

  // Polls ServerReady (and ModelReady for `model` when non-empty) every
  // `poll` until ready.
  // \error kDeadlineExceeded naming the target and the last answer or error
  //   when `deadline` passes first.
  absl::Status WaitReady(absl::Time deadline, absl::string_view model = "",
                         absl::Duration poll = absl::Milliseconds(100));

 private:
  InferenceClient(std::string target, std::shared_ptr<grpc::Channel> channel,
                  std::unique_ptr<inference::GRPCInferenceService::Stub> infer,
                  std::unique_ptr<ClusterService::Stub> cluster)
      : target_(std::move(target)),
        channel_(std::move(channel)),
        infer_stub_(std::move(infer)),
        cluster_stub_(std::move(cluster)) {}

  // Output names from the model's metadata, fetched once per model.
  absl::StatusOr<std::vector<std::string>> OutputNames(absl::string_view model,
                                                       absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;  // the stubs' (raw ModelInfer)
  std::unique_ptr<inference::GRPCInferenceService::Stub> infer_stub_;
  std::unique_ptr<ClusterService::Stub> cluster_stub_;
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> output_names_
      ABSL_GUARDED_BY(mu_);
};

// Decodes one KServe output (raw bytes, moved out of *raw, or typed
// contents) into a NamedTensor. Exposed for tests. \error kInternal naming the
// output on a length mismatch or an unknown datatype.
absl::StatusOr<NamedTensor> DecodeOutputTensor(
    const inference::ModelInferResponse::InferOutputTensor& output, std::string* raw);

// Parses "8,4096,2048" (also "[8, 4096, 2048]", "8x4096x2048").
// \error kInvalidArgument naming the text for an empty or non-integer dim or a
//   dim < 0.
absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_INFERENCE_CLIENT_H_
