// RmsNorm, LayerNorm and Softmax (see kernels.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"
#include "common/tensor/kernel_util.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

using kernel_internal::AsFloat32;
using kernel_internal::CheckFloat;

absl::Status CheckNormArgs(absl::string_view op, const Tensor& x, const Tensor& param,
                           absl::string_view role, double eps, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckFloat(op, "input", x.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat(op, role, param.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat(op, "out_dtype", out_dtype));
  if (x.rank() == 0) return InvalidArgument(op, ": input ", x.ToString(), " has rank 0");
  if (param.rank() != 1 || param.dim(0) != x.dim(x.rank() - 1)) {
    return InvalidArgument(op, ": ", role, " ", param.ToString(), " does not match input ",
                           x.ToString(), " (expected [", x.dim(x.rank() - 1), "])");
  }
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return InvalidArgument(op, ": epsilon ", eps, " must be finite and >= 0");
  }
  return absl::OkStatus();
}

// Normalizes each row of x's last dim: norm_row(row, d, out_row) writes one
// float32 row. Returns the result in out_dtype.
template <typename NormRow>
absl::StatusOr<Tensor> NormalizeRows(const Tensor& x, DType out_dtype, NormRow norm_row) {
  std::optional<Tensor> xs;
  const float* px = AsFloat32(x, &xs).data<float>();
  const int64_t d = x.dim(x.rank() - 1);
  Tensor out = Tensor::Zeros(DType::kFloat32, x.shape());
  float* po = out.data<float>();
  const int64_t rows = d == 0 ? 0 : x.NumElements() / d;
  for (int64_t r = 0; r < rows; ++r) norm_row(px + r * d, d, po + r * d);
  return kernel_internal::FinishFloat32(std::move(out), out_dtype);
}

}  // namespace

absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Tensor& scale, double eps,
                               DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckNormArgs("RmsNorm", x, scale, "scale", eps, out_dtype));
  std::optional<Tensor> ss;
  const float* ps = AsFloat32(scale, &ss).data<float>();
  return NormalizeRows(x, out_dtype, [&](const float* row, int64_t d, float* out) {
    double sum_sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sum_sq += static_cast<double>(row[j]) * row[j];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / d + eps));
    for (int64_t j = 0; j < d; ++j) out[j] = row[j] * inv * ps[j];
  });
}

absl::StatusOr<Tensor> LayerNorm(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                 double eps, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckNormArgs("LayerNorm", x, scale, "scale", eps, out_dtype));
  MS_RETURN_IF_ERROR(CheckNormArgs("LayerNorm", x, bias, "bias", eps, out_dtype));
  std::optional<Tensor> ss, bs;
  const float* ps = AsFloat32(scale, &ss).data<float>();
  const float* pb = AsFloat32(bias, &bs).data<float>();
  return NormalizeRows(x, out_dtype, [&](const float* row, int64_t d, float* out) {
    double sum = 0.0;
    for (int64_t j = 0; j < d; ++j) sum += row[j];
    const double mean = sum / d;
    double var = 0.0;
    for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= d;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - m) * inv * ps[j] + pb[j];
  });
}

absl::StatusOr<Tensor> Softmax(const Tensor& x, int64_t axis, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckFloat("Softmax", "input", x.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("Softmax", "out_dtype", out_dtype));
  const int64_t rank = x.rank();
  if (axis < -rank || axis >= rank) {
    return InvalidArgument("Softmax: axis ", axis, " is out of range for ", x.ToString());
  }
  if (axis < 0) axis += rank;
  std::optional<Tensor> xs;
  const float* px = AsFloat32(x, &xs).data<float>();
  Tensor out = Tensor::Zeros(DType::kFloat32, x.shape());
  float* po = out.data<float>();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < rank; ++i) inner *= x.dim(i);
  const int64_t n = x.dim(axis);
  std::vector<float> mx(inner), sum(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const float* in = px + o * n * inner;
    float* dst = po + o * n * inner;
    std::fill(mx.begin(), mx.end(), -INFINITY);
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], in[k * inner + j]);
    }
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t j = 0; j < inner; ++j) {
        const float e = std::exp(in[k * inner + j] - mx[j]);
        dst[k * inner + j] = e;
        sum[j] += e;
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t j = 0; j < inner; ++j) dst[k * inner + j] /= sum[j];
    }
  }
  return kernel_internal::FinishFloat32(std::move(out), out_dtype);
}

}  // namespace meshserve
