// Elementwise kernels: Add, Mul (numpy broadcasting), unary activations,
// AccumulateInto and Sum (see kernels.h). Gelu (tanh form) and Silu run the
// vectorised kernels of activations.h; outputs are allocated uninitialised
// (every element is written), not zeroed.
//
// Thread-safety: pure functions.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/activations.h"
#include "common/tensor/convert.h"
#include "common/tensor/kernel_util.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

using kernel_internal::AsFloat32;
using kernel_internal::CheckFloat;

constexpr int64_t kChunk = 2048;

// Applies `rows` (a float32 array kernel: rows(in, n, out), in == out
// allowed) to x, writing out_dtype: straight from x's buffer into the
// output's when both are float32, else chunk by chunk through a float32
// buffer. The output is not zeroed first: every element is written.
template <typename Rows>
absl::StatusOr<Tensor> MapUnary(absl::string_view op, const Tensor& x, DType out_dtype,
                                Rows rows) {
  MS_RETURN_IF_ERROR(CheckFloat(op, "input", x.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat(op, "out_dtype", out_dtype));
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(out_dtype, x.shape()));
  const int64_t n = x.NumElements();
  if (x.dtype() == DType::kFloat32 && out_dtype == DType::kFloat32) {
    rows(x.data<float>(), n, out.data<float>());
    return out;
  }
  const int64_t in_size = DTypeSize(x.dtype()), out_size = DTypeSize(out_dtype);
  float buf[kChunk];
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    WidenToFloat(x.dtype(), x.raw_data() + off * in_size, m, buf);
    rows(buf, m, buf);
    NarrowFromFloat(buf, m, out_dtype, out.raw_data() + off * out_size);
  }
  return out;
}

// A scalar fn as a row kernel of MapUnary.
template <typename Fn>
auto Scalar(Fn fn) {
  return [fn](const float* in, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);
  };
}

// out = fn(a, b) with numpy broadcasting, computed in float32.
template <typename Fn>
absl::StatusOr<Tensor> MapBinary(absl::string_view op, const Tensor& a, const Tensor& b,
                                 DType out_dtype, Fn fn) {
  MS_RETURN_IF_ERROR(CheckFloat(op, "lhs", a.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat(op, "rhs", b.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat(op, "out_dtype", out_dtype));
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(a.shape(), b.shape()), op);
  std::optional<Tensor> a_store, b_store;
  const float* pa = AsFloat32(a, &a_store).data<float>();
  const float* pb = AsFloat32(b, &b_store).data<float>();
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(DType::kFloat32, shape));
  float* po = out.data<float>();
  const int rank = static_cast<int>(shape.size());
  if (out.NumElements() == 0) return kernel_internal::FinishFloat32(std::move(out), out_dtype);
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < out.NumElements(); ++i) po[i] = fn(pa[i], pb[i]);
    return kernel_internal::FinishFloat32(std::move(out), out_dtype);
  }
  // Strides of a and b over the output's dims (0 where broadcast).
  auto strides_for = [&](const Tensor& t) {
    std::vector<int64_t> s(rank, 0);
    const std::vector<int64_t> own = RowMajorStrides(t.shape());
    const int shift = rank - t.rank();
    for (int i = 0; i < t.rank(); ++i) s[i + shift] = t.dim(i) == 1 ? 0 : own[i];
    return s;
  };
  const std::vector<int64_t> sa = strides_for(a), sb = strides_for(b);
  const int64_t inner = rank == 0 ? 1 : shape[rank - 1];
  const int64_t ia = rank == 0 ? 0 : sa[rank - 1], ib = rank == 0 ? 0 : sb[rank - 1];
  std::vector<int64_t> idx(std::max(rank - 1, 0), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t done = 0; done < out.NumElements(); done += inner) {
    float* dst = po + done;
    const float *ra = pa + oa, *rb = pb + ob;
    // The common runs (a bias row, a scalar) as loops the compiler vectorises.
    if (ia == 1 && ib == 1) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(ra[j], rb[j]);
    } else if (ia == 1 && ib == 0) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(ra[j], *rb);
    } else if (ia == 0 && ib == 1) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(*ra, rb[j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(ra[j * ia], rb[j * ib]);
    }
    for (int d = rank - 2; d >= 0; --d) {
      ++idx[d];
      oa += sa[d];
      ob += sb[d];
      if (idx[d] < shape[d]) break;
      oa -= idx[d] * sa[d];
      ob -= idx[d] * sb[d];
      idx[d] = 0;
    }
  }
  return kernel_internal::FinishFloat32(std::move(out), out_dtype);
}

template <typename T>
void AddInPlace(T* acc, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                     absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return InvalidArgument("shapes ", ShapeToString(a), " and ", ShapeToString(b),
                             " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b, DType out_dtype) {
  return MapBinary("Add", a, b, out_dtype, [](float x, float y) { return x + y; });
}

absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b, DType out_dtype) {
  return MapBinary("Mul", a, b, out_dtype, [](float x, float y) { return x * y; });
}

absl::StatusOr<Tensor> Relu(const Tensor& x, DType out_dtype) {
  // max(x, 0) keeps NaN as jax.nn.relu does.
  return MapUnary("Relu", x, out_dtype,
                  Scalar([](float v) { return v > 0.0f || v != v ? v : 0.0f; }));
}

absl::StatusOr<Tensor> Gelu(const Tensor& x, DType out_dtype, bool approximate) {
  if (approximate) {  // activations.h: vectorised, x sigmoid(2u) form
    const SmallMIsa isa = DefaultSmallMIsa();
    return MapUnary("Gelu", x, out_dtype, [isa](const float* in, int64_t n, float* out) {
      GeluTanhF32(in, n, out, isa);
    });
  }
  return MapUnary("Gelu", x, out_dtype, Scalar([](float v) {
                    return 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f));
                  }));
}

absl::StatusOr<Tensor> Silu(const Tensor& x, DType out_dtype) {
  const SmallMIsa isa = DefaultSmallMIsa();
  return MapUnary("Silu", x, out_dtype,
                  [isa](const float* in, int64_t n, float* out) { SiluF32(in, n, out, isa); });
}

absl::StatusOr<Tensor> Tanh(const Tensor& x, DType out_dtype) {
  return MapUnary("Tanh", x, out_dtype, Scalar([](float v) { return std::tanh(v); }));
}

absl::Status AccumulateInto(Tensor* acc, const Tensor& x) {
  if (acc->dtype() != x.dtype() || acc->shape() != x.shape()) {
    return InvalidArgument("AccumulateInto: accumulator ", acc->ToString(), " and term ",
                           x.ToString(), " differ in dtype or shape");
  }
  const int64_t n = x.NumElements();
  switch (x.dtype()) {
    case DType::kFloat32: AddInPlace(acc->data<float>(), x.data<float>(), n); break;
    case DType::kFloat64: AddInPlace(acc->data<double>(), x.data<double>(), n); break;
    case DType::kInt32: AddInPlace(acc->data<int32_t>(), x.data<int32_t>(), n); break;
    case DType::kInt64: AddInPlace(acc->data<int64_t>(), x.data<int64_t>(), n); break;
    case DType::kBFloat16:
    case DType::kFloat16: {
      float a[kChunk], b[kChunk];
      const int64_t size = DTypeSize(x.dtype());
      for (int64_t off = 0; off < n; off += kChunk) {
        const int64_t m = std::min(kChunk, n - off);
        WidenToFloat(x.dtype(), acc->raw_data() + off * size, m, a);
        WidenToFloat(x.dtype(), x.raw_data() + off * size, m, b);
        for (int64_t i = 0; i < m; ++i) a[i] += b[i];
        NarrowFromFloat(a, m, x.dtype(), acc->raw_data() + off * size);
      }
      break;
    }
    default:
      return InvalidArgument("AccumulateInto: cannot accumulate dtype ", DTypeName(x.dtype()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Sum(absl::Span<const Tensor* const> terms, DType out_dtype) {
  if (terms.empty()) return InvalidArgument("Sum: no terms");
  MS_RETURN_IF_ERROR(CheckFloat("Sum", "out_dtype", out_dtype));
  Tensor acc = Tensor::Zeros(DType::kFloat32, terms[0]->shape());
  float buf[kChunk];
  for (const Tensor* t : terms) {
    MS_RETURN_IF_ERROR(CheckFloat("Sum", "term", t->dtype()));
    if (t->shape() != acc.shape()) {
      return InvalidArgument("Sum: term ", t->ToString(), " does not have the shape ",
                             ShapeToString(acc.shape()));
    }
    const int64_t n = t->NumElements(), size = DTypeSize(t->dtype());
    float* a = acc.data<float>();
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t m = std::min(kChunk, n - off);
      WidenToFloat(t->dtype(), t->raw_data() + off * size, m, buf);
      for (int64_t i = 0; i < m; ++i) a[off + i] += buf[i];
    }
  }
  return kernel_internal::FinishFloat32(std::move(acc), out_dtype);
}

}  // namespace meshserve
