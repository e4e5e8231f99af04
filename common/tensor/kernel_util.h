// Helpers shared by the kernel .cc files (not part of the public kernel API).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_KERNEL_UTIL_H_
#define MESHSERVE_COMMON_TENSOR_KERNEL_UTIL_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace kernel_internal {

// \error kInvalidArgument "<op>: <role> has dtype <d>; expected a float dtype".
absl::Status CheckFloat(absl::string_view op, absl::string_view role, DType dtype);

// A float32 view of `x`: `x` itself when it is float32, else a widened copy
// held in `storage`.
const Tensor& AsFloat32(const Tensor& x, std::optional<Tensor>* storage);

// out[j] = in[src_index(j)] for out.shape = shape permuted by perm
// (out.shape[i] = shape[perm[i]]), elements of `elem_size` bytes.
// Precondition: perm is a valid permutation of [0, shape.size()).
void TransposeBytes(const char* in, absl::Span<const int64_t> shape,
                    absl::Span<const int64_t> perm, int64_t elem_size, char* out);

// Validates perm as a permutation of [0, rank). \error kInvalidArgument.
absl::Status CheckPermutation(absl::string_view op, absl::Span<const int64_t> perm, int rank);

// Converts a float32 tensor to out_dtype, moving when it already is float32.
absl::StatusOr<Tensor> FinishFloat32(Tensor f32, DType out_dtype);

}  // namespace kernel_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_KERNEL_UTIL_H_
