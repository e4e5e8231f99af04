// Host tensors: a dtype, a shape and an owned, 64-byte-aligned byte buffer
// holding the elements row-major (C order), raw little-endian (bfloat16 and
// float16 as uint16 bit patterns, bool as one byte 0/1).
//
//   ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, {2, 3}));  // zeros
//   t.data<float>()[1 * 3 + 2] = 5.0f;                      // element [1, 2]
//   ASSIGN_OR_RETURN(Tensor u, Tensor::FromBytes(DType::kBFloat16, {4}, bytes));
//
// A BoxTensor is a Tensor that holds the sub-box `box` of a larger global array:
// tensor.shape() == box.shape(); element g (global index) is stored at local
// index g - box.begin.
//
// Validation policy: Create / FromBytes / FromValues check their arguments
// (negative dims, overflowing sizes, byte-length mismatch) and return
// kInvalidArgument naming the values; Zeros() is the unchecked twin for code
// that already holds a validated shape (DCHECK only).
//
// Value semantics: copying a Tensor copies its bytes (use std::move to hand a
// buffer over; moved-from tensors are empty rank-0 float32 with no buffer).
//
// Memory: buffers come from AllocateTensorBuffer (buffer_pool.h), which
// recycles big ones in a process-wide pool that the binaries configure.
//
// Thread-safety: a Tensor is a plain value; concurrent const access is safe.
#ifndef MESHSERVE_COMMON_TENSOR_TENSOR_H_
#define MESHSERVE_COMMON_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/base/logging.h"
#include "common/base/shape_string.h"  // ShapeToString, for this header's users
#include "common/sharding/box.h"
#include "common/tensor/buffer_pool.h"  // kTensorAlignment, TensorBuffer

namespace meshserve {

// Product of `shape`. \error kInvalidArgument for a negative dim or overflow.
absl::StatusOr<int64_t> NumElementsOfShape(absl::Span<const int64_t> shape);

// Row-major strides in elements: strides[i] = product of shape[i+1..].
std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> shape);

class Tensor {
 public:
  // An empty rank-0 float32 tensor with no buffer (NumBytes() == 0 even
  // though NumElements() == 1); only useful as a placeholder to assign to.
  Tensor() = default;
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() = default;

  // A zero-filled tensor. \error kInvalidArgument for a negative dim or a byte
  // size that overflows int64; kResourceExhausted when the memory cannot be
  // allocated (never throws for a size that came from input).
  static absl::StatusOr<Tensor> Create(DType dtype, absl::Span<const int64_t> shape);
  // Create without the zero fill, for callers that write every byte (reads,
  // chunk assembly). The contents are unspecified until written.
  static absl::StatusOr<Tensor> CreateUninitialized(DType dtype,
                                                    absl::Span<const int64_t> shape);
  // Unchecked twin of Create. Precondition (DCHECK): dims >= 0, no overflow.
  static Tensor Zeros(DType dtype, absl::Span<const int64_t> shape);
  // Copies `bytes` (raw little-endian, row-major).
  // \error kInvalidArgument when bytes.size() != NumElements * DTypeSize,
  //   naming the expected and the given byte counts and the shape.
  static absl::StatusOr<Tensor> FromBytes(DType dtype, absl::Span<const int64_t> shape,
                                          absl::string_view bytes);
  // From float values (converted to `dtype`; any dtype, integers by rounding
  // toward zero as static_cast). \error kInvalidArgument on a count mismatch.
  static absl::StatusOr<Tensor> FromValues(DType dtype, absl::Span<const int64_t> shape,
                                           absl::Span<const float> values);
  // Same for int32 ids.
  static absl::StatusOr<Tensor> FromInt32(absl::Span<const int64_t> shape,
                                          absl::Span<const int32_t> values);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t NumElements() const { return num_elements_; }
  int64_t NumBytes() const { return num_bytes_; }

  // Typed element access. Precondition (DCHECK): sizeof(T) == DTypeSize(dtype()).
  // Use uint16_t for bfloat16/float16, uint8_t for bool.
  template <typename T>
  T* data() {
    MS_DCHECK(sizeof(T) == static_cast<size_t>(DTypeSize(dtype_)));
    return reinterpret_cast<T*>(buffer_.get());
  }
  template <typename T>
  const T* data() const {
    MS_DCHECK(sizeof(T) == static_cast<size_t>(DTypeSize(dtype_)));
    return reinterpret_cast<const T*>(buffer_.get());
  }
  char* raw_data() { return buffer_.get(); }
  const char* raw_data() const { return buffer_.get(); }
  // A view of the whole buffer (valid while the tensor lives and is unchanged).
  absl::string_view bytes() const {
    return absl::string_view(buffer_.get(), static_cast<size_t>(num_bytes_));
  }

  // Changes the shape, keeping the bytes (metadata only).
  // \error kInvalidArgument when the element counts differ or a dim is negative.
  absl::Status SetShape(absl::Span<const int64_t> shape);

  // Element i (flat row-major index) widened to float (ints converted,
  // bool 0/1). Precondition (DCHECK): 0 <= i < NumElements(). For tests and
  // slow paths only.
  float GetFloat(int64_t i) const;
  // All elements as floats (GetFloat of each).
  std::vector<float> ToFloatVector() const;

  // "f32[2, 3]" (dtype short name and shape; no values).
  std::string ToString() const;
  // Same dtype, shape and bytes.
  friend bool operator==(const Tensor& a, const Tensor& b);
  friend bool operator!=(const Tensor& a, const Tensor& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Tensor& t) {
    return os << t.ToString();
  }

 private:
  // A buffer for num_bytes_ (buffer_pool.h), zero-filled when `zero`, else
  // with only its padding zeroed (callers that overwrite every byte).
  absl::Status Allocate(bool zero);
  // Allocate for unchecked, internal sizes: throws std::bad_alloc on failure,
  // as `new` does (the copy constructor and Zeros cannot return a Status).
  void AllocateOrThrow(bool zero);

  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  int64_t num_elements_ = 1;
  int64_t num_bytes_ = 0;
  TensorBuffer buffer_;
};

// Converts every element to `to` (float types via float32, except float64 ->
// int64/float64 kept exact; float -> int rounds toward zero as static_cast;
// float -> bfloat16/float16 rounds to nearest even). Same dtype: a copy.
absl::StatusOr<Tensor> ConvertDType(const Tensor& x, DType to);

// A tensor holding the sub-box `box` of a global array (see file comment).
struct BoxTensor {
  Box box;
  Tensor tensor;

  // A zero-filled tensor of box.shape().
  // \error kInvalidArgument for a box with end < begin.
  static absl::StatusOr<BoxTensor> Create(DType dtype, const Box& box);
  // Wraps `tensor` as holding `box`.
  // \error kInvalidArgument when tensor.shape() != box.shape().
  static absl::StatusOr<BoxTensor> Wrap(Box box, Tensor tensor);

  std::string ToString() const;  // "f32[2, 4] @ [0:2, 4:8]"
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_TENSOR_H_
