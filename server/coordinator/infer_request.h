// A request to the coordinator (InferRequest, its inputs), its answer
// (InferResponse, its outputs), and the check of a request against its model.
//
// ValidateInferRequest accepts a request when:
//   - every input names a model input, at most once, and every model input is
//     given;
//   - each input has the model's dtype (INT64 is accepted for an int32 input
//     and INT32 for an int64 one, converted; a value outside int32 is an
//     error naming the input) and rank, dims >= 1 that equal the model's
//     where it fixes them (-1 in the model: any size), and exactly dtype size
//     x product(shape) bytes of data;
//   - the ids an embed layer reads straight from an input lie in [0, vocab);
//   - every requested output and every out_sharding key names a model output,
//     and every out_sharding parses as a JAX PartitionSpec ("P('data', None)").
// Whether an out_sharding fits the mesh is the compiler's check (Compile).
// All errors are kInvalidArgument and name the model, the value and what was
// expected, e.g.
//   model 'fixed' input 'x': shape [6,8] dim 0 is 6, expected 8 (model shape [8,6])
//
// Thread-safety: plain values and a pure function.
#ifndef MESHSERVE_SERVER_COORDINATOR_INFER_REQUEST_H_
#define MESHSERVE_SERVER_COORDINATOR_INFER_REQUEST_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/program/decode_step.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "common/tensor/named_tensor.h"
#include "server/compiler/model_compiler.h"

namespace meshserve {

// What the inference service hands to Coordinator::Infer.
struct InferRequest {
  std::string model;
  std::string id;
  std::vector<NamedTensor> inputs;
  std::vector<std::string> requested_outputs;  // empty: all
  std::map<std::string, std::string> out_shardings;  // output -> JAX spec text
  absl::Duration timeout = absl::ZeroDuration();     // <= 0: options default
  // A generation step (server/coordinator/generate): runs once (never
  // batched or retried: it extends the workers' KV caches) on param version
  // `param_version` (0: the placement's).
  std::shared_ptr<const DecodeStepIr> decode;
  int64_t param_version = 0;
  // The model file to run instead of the model's own (its decode variant,
  // server/compiler/decode_model.h: same params, other layers), and the key
  // that tells its programs apart in the program cache.
  std::shared_ptr<const ModelFile> variant;
  std::string variant_key;
};

// One output of a request: the tensor, assembled, and its JAX type
// (float32[8@data,6]).
struct InferOutput {
  NamedTensor tensor;
  std::string type_str;
};

// The answer to an InferRequest, from one generation of the model's placement.
struct InferResponse {
  std::string model;
  std::string id;
  int64_t generation = 0;
  // The param version the answer was computed with (the request's pinned
  // version, else the placement's); reported as the response parameter
  // "param_version", so a client can check the answer against that version.
  int64_t param_version = 0;
  std::vector<InferOutput> outputs;
  int64_t batch_size = 0;  // rows of the batched execution (batcher.h); 0: unbatched
  int64_t queue_us = 0;    // time queued for batching
  int64_t compute_us = 0;  // the workers' Execute calls (batched: its batch's)
};

// A request that passed ValidateInferRequest, in the compiler's terms. It
// points into the request (`inputs`), which must outlive it.
struct ValidatedRequest {
  std::shared_ptr<const ModelFile> model;
  InputShapes shapes;
  OutShardings out_specs;
  std::vector<std::string> outputs;  // requested, in model order
  std::map<std::string, const NamedTensor*> inputs;
  // Inputs converted to the model's dtype (an INT64 request tensor for an
  // int32 input, or INT32 for int64); `inputs` points here for those.
  std::vector<std::shared_ptr<const NamedTensor>> converted;
  // Identifies (shapes, out_specs) in the program cache (program_cache.h).
  std::string cache_key_suffix;
};

// \error kInvalidArgument for a request the model does not accept (see the
//   file comment).
absl::StatusOr<ValidatedRequest> ValidateInferRequest(
    std::shared_ptr<const ModelFile> model, const InferRequest& request);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_INFER_REQUEST_H_
