// Tensor and BoxTensor (tensor.h): shape arithmetic, construction and
// conversion. Buffers come from buffer_pool.h.
//
// Thread-safety: see tensor.h (plain values).
#include "common/tensor/tensor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"

namespace meshserve {

absl::StatusOr<int64_t> NumElementsOfShape(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("shape ", ShapeToString(shape), " has a negative dim");
    if (!CheckedMul(n, d, &n)) {
      return InvalidArgument("shape ", ShapeToString(shape), " has too many elements");
    }
  }
  return n;
}

std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

absl::Status Tensor::Allocate(bool zero) {
  MS_ASSIGN_OR_RETURN(buffer_, AllocateTensorBuffer(num_bytes_, zero),
                      "tensor ", DTypeShortName(dtype_), ShapeToString(shape_));
  return absl::OkStatus();
}

void Tensor::AllocateOrThrow(bool zero) {
  if (!Allocate(zero).ok()) throw std::bad_alloc();
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_) {
  if (other.buffer_ != nullptr) {
    AllocateOrThrow(/*zero=*/false);
    std::memcpy(buffer_.get(), other.buffer_.get(), static_cast<size_t>(num_bytes_));
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_),
      buffer_(std::move(other.buffer_)) {
  other.dtype_ = DType::kFloat32;
  other.shape_.clear();
  other.num_elements_ = 1;
  other.num_bytes_ = 0;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    num_elements_ = other.num_elements_;
    num_bytes_ = other.num_bytes_;
    buffer_ = std::move(other.buffer_);
    other.dtype_ = DType::kFloat32;
    other.shape_.clear();
    other.num_elements_ = 1;
    other.num_bytes_ = 0;
  }
  return *this;
}

absl::StatusOr<Tensor> Tensor::CreateUninitialized(DType dtype,
                                                   absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(shape));
  int64_t bytes;
  if (!CheckedMul(n, DTypeSize(dtype), &bytes)) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape),
                           " is too large");
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = n;
  t.num_bytes_ = bytes;
  MS_RETURN_IF_ERROR(t.Allocate(/*zero=*/false));
  return t;
}

absl::StatusOr<Tensor> Tensor::Create(DType dtype, absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, shape));
  std::memset(t.buffer_.get(), 0, static_cast<size_t>(t.num_bytes_));
  return t;
}

Tensor Tensor::Zeros(DType dtype, absl::Span<const int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = 1;
  for (int64_t d : shape) {
    MS_DCHECK(d >= 0);  // validated by callers (Create)
    t.num_elements_ *= d;
  }
  t.num_bytes_ = t.num_elements_ * DTypeSize(dtype);
  t.AllocateOrThrow(/*zero=*/true);
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view bytes) {
  MS_ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, shape));
  if (static_cast<int64_t>(bytes.size()) != t.num_bytes_) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape),
                           " needs ", t.num_bytes_, " bytes, got ", bytes.size());
  }
  if (!bytes.empty()) std::memcpy(t.buffer_.get(), bytes.data(), bytes.size());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromValues(DType dtype, absl::Span<const int64_t> shape,
                                          absl::Span<const float> values) {
  MS_ASSIGN_OR_RETURN(Tensor t, Create(dtype, shape));
  if (static_cast<int64_t>(values.size()) != t.num_elements_) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape), " has ",
                           t.num_elements_, " elements, got ", values.size(), " values");
  }
  NarrowFromFloat(values.data(), t.num_elements_, dtype, t.buffer_.get());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromInt32(absl::Span<const int64_t> shape,
                                         absl::Span<const int32_t> values) {
  return FromBytes(DType::kInt32, shape,
                   absl::string_view(reinterpret_cast<const char*>(values.data()),
                                     values.size() * sizeof(int32_t)));
}

absl::Status Tensor::SetShape(absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(shape));
  if (n != num_elements_) {
    return InvalidArgument("cannot reshape ", ToString(), " (", num_elements_,
                           " elements) to ", ShapeToString(shape), " (", n, " elements)");
  }
  shape_.assign(shape.begin(), shape.end());
  return absl::OkStatus();
}

float Tensor::GetFloat(int64_t i) const {
  MS_DCHECK(i >= 0 && i < num_elements_);
  float f;
  WidenToFloat(dtype_, buffer_.get() + i * DTypeSize(dtype_), 1, &f);
  return f;
}

std::vector<float> Tensor::ToFloatVector() const {
  std::vector<float> out(static_cast<size_t>(buffer_ ? num_elements_ : 0));
  if (!out.empty()) WidenToFloat(dtype_, buffer_.get(), num_elements_, out.data());
  return out;
}

std::string Tensor::ToString() const {
  return absl::StrCat(DTypeShortName(dtype_), ShapeToString(shape_));
}

bool operator==(const Tensor& a, const Tensor& b) {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.bytes() == b.bytes();
}

absl::StatusOr<Tensor> ConvertDType(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(to, x.shape()));
  ConvertElements(x.dtype(), x.raw_data(), x.NumElements(), to, out.raw_data());
  return out;
}

absl::StatusOr<BoxTensor> BoxTensor::Create(DType dtype, const Box& box) {
  for (const Interval& iv : box.dims()) {
    if (iv.end < iv.begin) return InvalidArgument("box ", box.ToString(), " has end < begin");
  }
  MS_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(dtype, box.shape()));
  return BoxTensor{box, std::move(t)};
}

absl::StatusOr<BoxTensor> BoxTensor::Wrap(Box box, Tensor tensor) {
  if (tensor.shape() != box.shape()) {
    return InvalidArgument("tensor ", tensor.ToString(), " does not have the shape of box ",
                           box.ToString());
  }
  return BoxTensor{std::move(box), std::move(tensor)};
}

std::string BoxTensor::ToString() const {
  return absl::StrCat(tensor.ToString(), " @ ", box.ToString());
}

}  // namespace meshserve
