// NamedTensor's checked constructor and float32 view (named_tensor.h).
//
// Thread-safety: pure functions of their arguments.
#include "common/tensor/named_tensor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/base/shape_string.h"
#include "common/base/status_util.h"
#include "common/tensor/bfloat16.h"

namespace meshserve {
namespace {

template <typename T>
void Widen(const std::string& bytes, std::vector<float>* out) {
  size_t n = bytes.size() / sizeof(T);
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    T value;
    std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
    (*out)[i] = static_cast<float>(value);
  }
}

}  // namespace

absl::StatusOr<NamedTensor> NamedTensor::Create(std::string name, DType dtype,
                                                std::vector<int64_t> shape,
                                                std::string bytes) {
  int64_t num_elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return InvalidArgument("tensor '", name, "': negative dim in shape ",
                             ShapeToCompactString(shape));
    }
  }
  // A zero dim makes the tensor empty whatever the other dims are (as
  // NumElementsOfShape counts, so a .npy ParseNpy accepts is accepted here).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) num_elements = 0;
  for (int64_t dim : shape) {
    if (num_elements == 0) break;
    if (num_elements > (int64_t{1} << 50) / dim) {
      return InvalidArgument("tensor '", name, "': shape ", ShapeToCompactString(shape),
                             " is too large");
    }
    num_elements *= dim;
  }
  int64_t expected = num_elements * DTypeSize(dtype);
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return InvalidArgument("tensor '", name, "': ", DTypeName(dtype),
                           ShapeToCompactString(shape), " needs ", expected,
                           " bytes, got ", bytes.size());
  }
  NamedTensor tensor;
  tensor.name = std::move(name);
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  tensor.bytes = std::move(bytes);
  return tensor;
}

int64_t NamedTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<std::vector<float>> NamedTensor::ToFloat32() const {
  std::vector<float> out;
  switch (dtype) {
    case DType::kFloat32:
      out.resize(bytes.size() / sizeof(float));
      // An empty tensor's data() may be null, which memcpy must not get.
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
      return out;
    case DType::kBFloat16: {
      out.resize(bytes.size() / 2);
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes.data() + 2 * i, 2);
        out[i] = BFloat16ToFloat(bits);
      }
      return out;
    }
    case DType::kFloat64:
      Widen<double>(bytes, &out);
      return out;
    case DType::kInt32:
      Widen<int32_t>(bytes, &out);
      return out;
    case DType::kInt64:
      Widen<int64_t>(bytes, &out);
      return out;
    default:
      return InvalidArgument("tensor '", name, "': cannot convert ",
                             DTypeName(dtype), " to float32");
  }
}

}  // namespace meshserve
