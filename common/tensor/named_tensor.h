// NamedTensor: one named dense tensor as it crosses the edges (a client's
// input or output, a coordinator request's input or output): a name, a dtype,
// a shape and its raw little-endian row-major bytes (bfloat16/float16 as
// uint16 bit patterns, bool as one byte). The wire forms (KServe's "FP32"
// datatype strings, the proto messages, REST JSON) are converted at the edges,
// not here.
//
// Create checks bytes.size() == product(shape) * DTypeSize(dtype); a plain
// aggregate (NamedTensor{...}) is not checked, so code that receives one from
// outside re-checks it (ValidateInferRequest, InferenceClient::Infer).
//
// Thread-safety: a plain value; concurrent const access is safe.
#ifndef MESHSERVE_COMMON_TENSOR_NAMED_TENSOR_H_
#define MESHSERVE_COMMON_TENSOR_NAMED_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/dtype.h"

namespace meshserve {

struct NamedTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian, row-major

  // \error kInvalidArgument naming the tensor, its dtype and shape and both
  //   byte counts when bytes.size() != product(shape) * DTypeSize(dtype)
  //   ("tensor 'x': bfloat16[3] needs 6 bytes, got 4"); also for a negative
  //   dim or a shape of more than 2^50 elements.
  static absl::StatusOr<NamedTensor> Create(std::string name, DType dtype,
                                            std::vector<int64_t> shape,
                                            std::string bytes);
  // product(shape) (1 for a scalar); unchecked.
  int64_t NumElements() const;
  // The values widened to float32 (bfloat16 exactly, float64 rounded, ints
  // converted). \error kInvalidArgument for other dtypes, naming the tensor.
  absl::StatusOr<std::vector<float>> ToFloat32() const;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_NAMED_TENSOR_H_
