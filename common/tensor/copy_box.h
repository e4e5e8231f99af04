// Copying a sub-box between tensors that hold boxes of the same global array.
//
// All three functions walk `sub` row-major and move one contiguous run at a
// time: the innermost dims over which both sides are contiguous are merged, so
// a sub-box spanning full rows of both tensors is a single memcpy. Bytes are
// raw little-endian, row-major over `sub` (the same layout as Tensor and as
// a TensorChunk on the wire).
//
//   src holds [0:4, 0:8], sub = [1:3, 2:6]  ->  ExtractBox gives the 2x4 elements
//   src[1:3, 2:6] (numpy), 8 * DTypeSize bytes.
//
// Accumulate: with accumulate=true, InsertBox/CopyBox add into dst instead of
// overwriting, in float32 for float32/bfloat16/float16 (the sum is rounded
// back to the destination dtype once per element) and in the integer type for
// int32/int64. Other dtypes: kInvalidArgument.
//
// Errors: kInvalidArgument for rank or dtype mismatch or a byte length that is
// not sub.NumElements() * DTypeSize; kOutOfRange when `sub` does not lie inside
// the box held (the message names both boxes). An empty `sub` is a no-op.
//
// Thread-safety: pure functions; concurrent InsertBox calls into one dst are
// safe only for disjoint sub-boxes without accumulate.
#ifndef MESHSERVE_COMMON_TENSOR_COPY_BOX_H_
#define MESHSERVE_COMMON_TENSOR_COPY_BOX_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// The raw bytes of src's elements inside `sub` (global coordinates).
absl::StatusOr<std::string> ExtractBox(const BoxTensor& src, const Box& sub);

// Same, appending to `*out` (lets a caller reuse one buffer).
absl::Status AppendBox(const BoxTensor& src, const Box& sub, std::string* out);

// Writes (or adds, see file comment) `bytes`, the row-major elements of `sub`
// in dst's dtype, into dst at `sub` (global coordinates).
absl::Status InsertBox(BoxTensor* dst, const Box& sub, absl::string_view bytes,
                       bool accumulate);

// dst[sub] = src[sub] (or +=), with no intermediate buffer. `sub` must lie in
// both boxes; dtypes must match.
absl::Status CopyBox(const BoxTensor& src, BoxTensor* dst, const Box& sub,
                     bool accumulate);

// The same on raw row-major arrays, without a Tensor: `full` holds a whole
// array of `shape` (elements of `elem` bytes), `packed` the row-major
// elements of `box`. ExtractBoxBytes copies full[box] into packed,
// InsertBoxBytes packed into full[box]; both move one contiguous run at a
// time. The caller sizes both buffers.
// \error kInternal when `box` does not lie in `shape`.
absl::Status ExtractBoxBytes(const char* full, absl::Span<const int64_t> shape, int64_t elem,
                             const Box& box, char* packed);
absl::Status InsertBoxBytes(char* full, absl::Span<const int64_t> shape, int64_t elem,
                            const Box& box, const char* packed);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_COPY_BOX_H_
