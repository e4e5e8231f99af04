// Human renderings for the cluster commands: `meshserve describe`, `status`
// and the type lines `meshserve infer` prints for each output.
//
// describe (one line per value, name then JAX type string, each name once:
// inputs, params, then layer results in model order), then the
// visualisations (rank <= 2) and each layer's collectives:
//
//   # model swiglu on mesh[fsdp=2,model=4]
//   x                 float32[8@fsdp,4096,2048]
//   gate_proj.kernel  float32[2048@fsdp,8192@model]
//   gate              float32[8@fsdp,4096,8192@model]
//   ...
//   # visualizations
//   gate_proj.kernel: float32[2048@fsdp,8192@model]
//   ┌──────┬──────┐ ...
//   # collectives
//   y: reduce-scatter h  33554432 bytes
//
// and, for a model that generates, its KV cache (the values of kind
// "kv_cache": per attention layer, keys and values as
// dtype[tokens, kv_heads, head_dim] with their sharding, the bytes a token
// takes on each worker, and those bytes summed over all layers):
//   # kv cache (per attention layer: [tokens, kv_heads, head_dim])
//   h0.attn.k_cache  float32[1024,12@model,64]
//     bytes per token: worker 0 (devices 0): 1536
//   ...
//   total bytes per token (all layers, k and v): worker 0 (devices 0): 36864
//
// Thread-safety: pure functions; OutputTypeResolver is single-threaded.
#ifndef MESHSERVE_CLIENT_CLI_FORMAT_H_
#define MESHSERVE_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/inference_client.h"
#include "proto/cluster_service.pb.h"

namespace meshserve {
namespace client {

std::string FormatDescribe(const DescribeResponse& response);
std::string FormatStatus(const ClusterStatusResponse& response);

// What `meshserve infer` prints for one output.
struct OutputType {
  std::string type_str;       // "float32[64@data,32]"
  std::string visualization;  // rank <= 2; may be empty
};

// The JAX type of `dtype[shape]` laid out by `spec_text` (JAX syntax) on the
// mesh `mesh_text` ("mesh[data=8]"), with its visualisation when rank <= 2.
// \error kInvalidArgument naming the spec or mesh when either does not parse
//   or does not fit the shape (JAX's message).
absl::StatusOr<OutputType> TypeFromSpec(DType dtype, const std::vector<int64_t>& shape,
                                        absl::string_view mesh_text,
                                        absl::string_view spec_text);

// Finds each output's type: the server's "type" and "visualization" output
// parameters when it sends them; else, for an output with a per-request
// out_sharding, TypeFromSpec on the model's mesh; else the value of that name
// in Describe(model, input_shapes). Describe is called at most once.
class OutputTypeResolver {
 public:
  OutputTypeResolver(InferenceClient& client, std::string model,
                     std::map<std::string, std::vector<int64_t>> input_shapes,
                     std::map<std::string, std::string> out_shardings,
                     absl::Time deadline)
      : client_(client),
        model_(std::move(model)),
        input_shapes_(std::move(input_shapes)),
        out_shardings_(std::move(out_shardings)),
        deadline_(deadline) {}

  // Never fails: an unknown type is printed as "dtype[shape] (sharding
  // unknown: reason)".
  OutputType Resolve(const InferOutput& output);

 private:
  const absl::StatusOr<DescribeResponse>& Described();
  // The type from Describe / TypeFromSpec alone.
  OutputType Derive(const NamedTensor& tensor);

  InferenceClient& client_;
  std::string model_;
  std::map<std::string, std::vector<int64_t>> input_shapes_;
  std::map<std::string, std::string> out_shardings_;
  absl::Time deadline_;
  std::optional<absl::StatusOr<DescribeResponse>> described_;
};

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_CLI_FORMAT_H_
