#include "common/tensor/kernel_util.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace kernel_internal {

absl::Status CheckFloat(absl::string_view op, absl::string_view role, DType dtype) {
  if (IsFloatDType(dtype)) return absl::OkStatus();
  return InvalidArgument(op, ": ", role, " has dtype ", DTypeName(dtype),
                         "; expected a float dtype (float32, bfloat16, float16, float64)");
}

const Tensor& AsFloat32(const Tensor& x, std::optional<Tensor>* storage) {
  if (x.dtype() == DType::kFloat32) return x;
  storage->emplace(Tensor::Zeros(DType::kFloat32, x.shape()));
  WidenToFloat(x.dtype(), x.raw_data(), x.NumElements(), (*storage)->data<float>());
  return **storage;
}

template <int kSize>
static void TransposeFixed(const char* in, absl::Span<const int64_t> shape,
                           absl::Span<const int64_t> perm, char* out) {
  const int rank = static_cast<int>(shape.size());
  const std::vector<int64_t> in_strides = RowMajorStrides(shape);
  std::vector<int64_t> out_shape(rank), strides(rank);  // strides: input stride of out dim i
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    out_shape[i] = shape[perm[i]];
    strides[i] = in_strides[perm[i]];
    total *= out_shape[i];
  }
  if (total == 0) return;
  if (rank == 0) {
    std::memcpy(out, in, kSize);
    return;
  }
  const int64_t inner = out_shape[rank - 1];
  const int64_t inner_stride = strides[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t src = 0;
  char* dst = out;
  for (int64_t done = 0; done < total; done += inner) {
    if (inner_stride == 1) {
      std::memcpy(dst, in + src * kSize, static_cast<size_t>(inner * kSize));
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        std::memcpy(dst + j * kSize, in + (src + j * inner_stride) * kSize, kSize);
      }
    }
    dst += inner * kSize;
    for (int d = rank - 2; d >= 0; --d) {
      ++idx[d];
      src += strides[d];
      if (idx[d] < out_shape[d]) break;
      src -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
}

void TransposeBytes(const char* in, absl::Span<const int64_t> shape,
                    absl::Span<const int64_t> perm, int64_t elem_size, char* out) {
  switch (elem_size) {
    case 1: TransposeFixed<1>(in, shape, perm, out); return;
    case 2: TransposeFixed<2>(in, shape, perm, out); return;
    case 4: TransposeFixed<4>(in, shape, perm, out); return;
    case 8: TransposeFixed<8>(in, shape, perm, out); return;
    default: break;
  }
}

absl::Status CheckPermutation(absl::string_view op, absl::Span<const int64_t> perm, int rank) {
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (int64_t p : perm) {
    if (!ok) break;
    if (p < 0 || p >= rank || seen[p]) {
      ok = false;
    } else {
      seen[p] = true;
    }
  }
  if (ok) return absl::OkStatus();
  return InvalidArgument(op, ": perm [", absl::StrJoin(perm, ", "),
                         "] is not a permutation of [0, ", rank, ")");
}

absl::StatusOr<Tensor> FinishFloat32(Tensor f32, DType out_dtype) {
  if (out_dtype == DType::kFloat32) return f32;
  return ConvertDType(f32, out_dtype);
}

}  // namespace kernel_internal
}  // namespace meshserve
