#include "common/tensor/initializers.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/parallel_for.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Stddev of the standard normal truncated to [-2, 2] (JAX variance_scaling).
constexpr double kTruncatedNormalStddev = 0.87962566103423978;
constexpr double kSqrt2 = 1.4142135623730951;

double U24(uint64_t bits) { return static_cast<double>(bits >> 40) * 0x1p-24; }
double U53(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53; }

// Fills `out` (n floats) with the values of flat indices [first, first + n).
struct Sampler {
  InitKind kind;
  uint64_t key;
  double a = 0.0, b = 0.0;  // kind-specific constants

  void Fill(int64_t first, int64_t n, float* out) const {
    switch (kind) {
      case InitKind::kZeros:
        for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
        return;
      case InitKind::kOnes:
        for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
        return;
      case InitKind::kUniform:  // a = scale
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<float>(U24(InitBits(key, first + i)) * a);
        }
        return;
      case InitKind::kXavierUniform:  // a = limit
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<float>((2.0 * U24(InitBits(key, first + i)) - 1.0) * a);
        }
        return;
      case InitKind::kNormal:  // a = stddev
        for (int64_t i = 0; i < n; ++i) {
          const double v = 2.0 * U53(InitBits(key, first + i)) - 1.0;
          out[i] = static_cast<float>(a * kSqrt2 * ErfInv(v));
        }
        return;
      case InitKind::kLecunNormal: {  // a = stddev / kTruncatedNormalStddev
        const double lo = std::erf(-kSqrt2), hi = std::erf(kSqrt2);
        for (int64_t i = 0; i < n; ++i) {
          const double v = lo + (hi - lo) * U53(InitBits(key, first + i));
          out[i] = static_cast<float>(a * kSqrt2 * ErfInv(v));
        }
        return;
      }
    }
  }
};

bool IsRandom(InitKind kind) { return kind != InitKind::kZeros && kind != InitKind::kOnes; }

absl::Status ValidateInit(const InitSpec& spec, absl::Span<const int64_t> full_shape,
                          const Box& box, DType dtype) {
  MS_RETURN_IF_ERROR(NumElementsOfShape(full_shape).status());
  if (box.rank() != static_cast<int>(full_shape.size())) {
    return InvalidArgument("box ", box.ToString(), " has rank ", box.rank(), " but shape ",
                           ShapeToString(full_shape), " has rank ", full_shape.size());
  }
  for (const Interval& iv : box.dims()) {
    if (iv.end < iv.begin) return InvalidArgument("box ", box.ToString(), " has end < begin");
  }
  if (!box.IsEmpty() && !Box::FromShape(full_shape).Contains(box)) {
    return OutOfRange("box ", box.ToString(), " is not inside shape ", ShapeToString(full_shape));
  }
  if (IsRandom(spec.kind) && !IsFloatDType(dtype)) {
    return InvalidArgument("init ", InitKindName(spec.kind), " needs a float dtype, got ",
                           DTypeName(dtype));
  }
  if (spec.kind == InitKind::kNormal && (!std::isfinite(spec.stddev) || spec.stddev < 0)) {
    return InvalidArgument("init normal: stddev ", spec.stddev, " must be finite and >= 0");
  }
  if (spec.kind == InitKind::kUniform && !std::isfinite(spec.scale)) {
    return InvalidArgument("init uniform: scale ", spec.scale, " must be finite");
  }
  return absl::OkStatus();
}

}  // namespace

InitSpec InitSpec::FromParam(const ParamDef& param) {
  InitSpec spec;
  spec.kind = param.init;
  spec.stddev = param.stddev;
  spec.scale = param.scale;
  return spec;
}

absl::string_view InitKindName(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros: return "zeros";
    case InitKind::kOnes: return "ones";
    case InitKind::kNormal: return "normal";
    case InitKind::kLecunNormal: return "lecun_normal";
    case InitKind::kXavierUniform: return "xavier_uniform";
    case InitKind::kUniform: return "uniform";
  }
  return "unknown";
}

absl::StatusOr<InitKind> ParseInitKind(absl::string_view text) {
  for (InitKind k : {InitKind::kZeros, InitKind::kOnes, InitKind::kNormal,
                     InitKind::kLecunNormal, InitKind::kXavierUniform, InitKind::kUniform}) {
    if (InitKindName(k) == text) return k;
  }
  return InvalidArgument("unknown init kind '", text,
                         "' (expected zeros, ones, normal, lecun_normal, xavier_uniform or "
                         "uniform)");
}

uint64_t InitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t InitNameHash(absl::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

uint64_t InitKey(int64_t seed, absl::string_view name) {
  return InitMix64(InitMix64(static_cast<uint64_t>(seed) + kGolden) ^ InitNameHash(name));
}

uint64_t InitBits(uint64_t key, int64_t flat_index) {
  return InitMix64(key + (static_cast<uint64_t>(flat_index) + 1) * kGolden);
}

double ErfInv(double x) {
  // Giles, "Approximating the erfinv function" (GPU Computing Gems, 2010),
  // single-precision coefficients.
  double w = -std::log((1.0 - x) * (1.0 + x));
  double p;
  const bool w_branch_tail = w >= 5.0;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double y = p * x;
  // The polynomial is accurate to 1.3e-7 relative (about one float32 ulp)
  // for w < 5; beyond, it targets float32's domain only, so the (rare, |x| >
  // 0.9966) tail is refined by Newton on log(erfc(t)) - log(1 - |x|), which is
  // nearly linear there, until converged.
  if (!w_branch_tail || !std::isfinite(y)) return y;
  constexpr double kTwoOverSqrtPi = 1.1283791670955126;
  const double a = std::fabs(x);
  double t = std::fabs(y);
  for (int step = 0; step < 8; ++step) {
    const double erfc_t = std::erfc(t);
    const double slope = -kTwoOverSqrtPi * std::exp(-t * t) / erfc_t;
    const double delta = (std::log(erfc_t) - std::log(1.0 - a)) / slope;
    t -= delta;
    if (std::fabs(delta) <= 1e-15 * t) break;
  }
  return x < 0 ? -t : t;
}

std::pair<double, double> InitFans(absl::Span<const int64_t> shape) {
  const size_t r = shape.size();
  if (r == 0) return {1.0, 1.0};
  if (r == 1) return {static_cast<double>(shape[0]), static_cast<double>(shape[0])};
  double receptive = 1.0;
  for (size_t i = 0; i + 2 < r; ++i) receptive *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[r - 2]) * receptive,
          static_cast<double>(shape[r - 1]) * receptive};
}

absl::StatusOr<Tensor> InitializeBox(const InitSpec& spec, int64_t seed,
                                     absl::string_view param_name,
                                     absl::Span<const int64_t> full_shape, const Box& box,
                                     DType dtype) {
  MS_RETURN_IF_ERROR(ValidateInit(spec, full_shape, box, dtype), "initializing '", param_name,
                     "'");
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(dtype, box.shape()));
  if (out.NumElements() == 0) return out;
  Sampler sampler{spec.kind, InitKey(seed, param_name)};
  const auto [fan_in, fan_out] = InitFans(full_shape);
  switch (spec.kind) {
    case InitKind::kUniform: sampler.a = spec.scale; break;
    case InitKind::kNormal: sampler.a = spec.stddev; break;
    case InitKind::kXavierUniform: sampler.a = std::sqrt(6.0 / (fan_in + fan_out)); break;
    case InitKind::kLecunNormal:
      sampler.a = std::sqrt(1.0 / fan_in) / kTruncatedNormalStddev;
      break;
    default: break;
  }
  // Walk the box row by row (innermost dim contiguous in the full tensor);
  // large boxes split their rows over a few threads.
  const int rank = box.rank();
  const std::vector<int64_t> strides = RowMajorStrides(full_shape);
  const int64_t row = rank == 0 ? 1 : box[rank - 1].size();
  const int64_t num_rows = out.NumElements() / row;
  const int64_t elem = DTypeSize(dtype);
  char* dst = out.raw_data();
  auto fill_rows = [&](int64_t row_begin, int64_t row_end) {
    std::vector<float> buf(static_cast<size_t>(row));
    for (int64_t r = row_begin; r < row_end; ++r) {
      int64_t rem = r;
      int64_t flat = rank == 0 ? 0 : box[rank - 1].begin;
      for (int d = rank - 2; d >= 0; --d) {
        flat += (box[d].begin + rem % box[d].size()) * strides[d];
        rem /= box[d].size();
      }
      sampler.Fill(flat, row, buf.data());
      NarrowFromFloat(buf.data(), row, dtype, dst + r * row * elem);
    }
  };
  constexpr int64_t kElementsPerThread = int64_t{1} << 20;
  const int64_t num_threads = std::min<int64_t>(
      {static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())), 8,
       num_rows, std::max<int64_t>(1, out.NumElements() / kElementsPerThread)});
  ParallelFor(static_cast<size_t>(num_threads), [&](size_t t) {
    const int64_t i = static_cast<int64_t>(t);
    fill_rows(num_rows * i / num_threads, num_rows * (i + 1) / num_threads);
  });
  return out;
}

}  // namespace meshserve
