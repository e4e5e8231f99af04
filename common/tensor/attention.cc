// Positions, Rope and MaskedSoftmax (see kernels.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/kernel_util.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

using kernel_internal::AsFloat32;
using kernel_internal::CheckFloat;

// The product of shape[begin, end).
int64_t Product(absl::Span<const int64_t> shape, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t i = begin; i < end; ++i) n *= shape[i];
  return n;
}

absl::StatusOr<int64_t> CanonicalAxis(absl::string_view op, absl::string_view what,
                                      int64_t axis, absl::Span<const int64_t> shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < -rank || axis >= rank) {
    return InvalidArgument(op, ": ", what, " ", axis, " is out of range for shape ",
                           ShapeToString(shape));
  }
  return axis < 0 ? axis + rank : axis;
}

// The where mask broadcast to x's shape, as float32 (nonzero keeps).
absl::StatusOr<Tensor> BroadcastMask(const Tensor& x, const Tensor& where) {
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(x.shape(), where.shape()),
                      "MaskedSoftmax: where");
  if (shape != x.shape()) {
    return InvalidArgument("MaskedSoftmax: where ", where.ToString(),
                           " does not broadcast to the input ", x.ToString());
  }
  Tensor w = where;
  if (w.dtype() != DType::kFloat32) {
    MS_ASSIGN_OR_RETURN(w, ConvertDType(where, DType::kFloat32));
  }
  return Add(Tensor::Zeros(DType::kFloat32, x.shape()), w, DType::kFloat32);
}

// An index range [offset, offset + n) must lie inside a non-empty table.
absl::Status CheckTable(const char* op, PositionTable table, int64_t offset, int64_t n) {
  if (table.empty() || (offset >= 0 && offset + n <= static_cast<int64_t>(table.size()))) {
    return absl::OkStatus();
  }
  return InvalidArgument(op, ": indices [", offset, ", ", offset + n, ") are past the ",
                         table.size(), " positions of the step");
}

}  // namespace

absl::StatusOr<Tensor> Positions(absl::Span<const int64_t> shape, int64_t axis,
                                 int64_t axis_offset, PositionTable table) {
  MS_ASSIGN_OR_RETURN(axis, CanonicalAxis("Positions", "axis", axis, shape));
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kInt32, shape));
  const int64_t n = shape[axis];
  MS_RETURN_IF_ERROR(CheckTable("Positions", table, axis_offset, n));
  const int64_t inner = Product(shape, axis + 1, shape.size());
  int32_t* po = out.data<int32_t>();
  for (int64_t i = 0; i < out.NumElements(); ++i) {
    const int64_t g = axis_offset + (i / inner) % n;
    po[i] = static_cast<int32_t>(table.empty() ? g : table[g]);
  }
  return out;
}

absl::StatusOr<Tensor> Rope(const Tensor& x, int64_t seq_axis, int64_t seq_offset, double theta,
                            DType out_dtype, PositionTable table) {
  MS_RETURN_IF_ERROR(CheckFloat("Rope", "input", x.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("Rope", "out_dtype", out_dtype));
  const int64_t rank = x.rank();
  if (rank < 2 || x.dim(rank - 1) % 2 != 0) {
    return InvalidArgument("Rope: input ", x.ToString(), " needs rank >= 2 and an even last dim");
  }
  MS_ASSIGN_OR_RETURN(seq_axis, CanonicalAxis("Rope", "seq_axis", seq_axis, x.shape()));
  if (seq_axis == rank - 1) {
    return InvalidArgument("Rope: seq_axis ", seq_axis, " is the rotated last dim of ",
                           x.ToString());
  }
  if (!(theta > 0) || !std::isfinite(theta)) {
    return InvalidArgument("Rope: theta ", theta, " must be finite and > 0");
  }
  const int64_t d = x.dim(rank - 1), half = d / 2;
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(theta, -2.0 * i / d));
  }
  const int64_t n = x.dim(seq_axis);
  MS_RETURN_IF_ERROR(CheckTable("Rope", table, seq_offset, n));
  const int64_t inner = Product(x.shape(), seq_axis + 1, rank);  // includes d
  std::optional<Tensor> xs;
  const float* px = AsFloat32(x, &xs).data<float>();
  Tensor out = Tensor::Zeros(DType::kFloat32, x.shape());
  float* po = out.data<float>();
  const int64_t rows = x.NumElements() / d;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = seq_offset + (r * d / inner) % n;
    const float pos = static_cast<float>(table.empty() ? g : table[g]);
    const float* in = px + r * d;
    float* dst = po + r * d;
    for (int64_t i = 0; i < half; ++i) {
      const float a = pos * inv_freq[i];
      const float c = std::cos(a), s = std::sin(a);
      dst[i] = in[i] * c - in[i + half] * s;
      dst[i + half] = in[i + half] * c + in[i] * s;
    }
  }
  return kernel_internal::FinishFloat32(std::move(out), out_dtype);
}

absl::StatusOr<Tensor> MaskedSoftmax(const Tensor& x, int64_t axis, const SoftmaxOptions& options,
                                     const Tensor* where, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckFloat("MaskedSoftmax", "input", x.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("MaskedSoftmax", "out_dtype", out_dtype));
  MS_ASSIGN_OR_RETURN(axis, CanonicalAxis("MaskedSoftmax", "axis", axis, x.shape()));
  const int64_t rank = x.rank();
  if (options.causal && rank < 2) {
    return InvalidArgument("MaskedSoftmax: causal needs rank >= 2, got ", x.ToString());
  }
  std::optional<Tensor> mask;
  if (where != nullptr) {
    MS_ASSIGN_OR_RETURN(mask, BroadcastMask(x, *where));
  }
  std::optional<Tensor> xs;
  const float* px = AsFloat32(x, &xs).data<float>();
  const float* pm = mask.has_value() ? mask->data<float>() : nullptr;
  const int64_t kdim = rank >= 2 ? x.dim(rank - 1) : 1;
  const int64_t qdim = rank >= 2 ? x.dim(rank - 2) : 1;
  auto keep = [&](int64_t flat) {
    if (pm != nullptr && pm[flat] == 0.0f) return false;
    if (!options.causal) return true;
    const int64_t k = options.k_offset + flat % kdim;
    const int64_t q = options.q_offset + (flat / kdim) % qdim;
    return k <= q;
  };
  Tensor out = Tensor::Zeros(DType::kFloat32, x.shape());
  float* po = out.data<float>();
  const int64_t outer = Product(x.shape(), 0, axis);
  const int64_t inner = Product(x.shape(), axis + 1, rank);
  const int64_t n = x.dim(static_cast<int>(axis));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t base = o * n * inner + j;
      float mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t f = base + k * inner;
        if (keep(f)) mx = std::max(mx, px[f] * options.scale);
      }
      if (mx == -INFINITY) continue;  // every entry masked (or -inf): zeros
      float sum = 0.0f;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t f = base + k * inner;
        if (!keep(f)) continue;
        po[f] = std::exp(px[f] * options.scale - mx);
        sum += po[f];
      }
      for (int64_t k = 0; k < n; ++k) po[base + k * inner] /= sum;
    }
  }
  return kernel_internal::FinishFloat32(std::move(out), out_dtype);
}

}  // namespace meshserve
