// Parameter initializers that any worker can evaluate for any box.
//
// Each element's value depends only on (seed, param_name, flat row-major index
// of the element in the FULL tensor) and the init kind/shape, never on the box
// it is created in, so every mesh and worker count holds the same numbers.
//
// The generator (exact; a Python re-implementation with NumPy uint64 matches
// bit for bit up to the final erfinv, see below). All arithmetic mod 2^64:
//
//   Mix64(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//              z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//              return z ^ (z >> 31)
//   G        = 0x9E3779B97F4A7C15
//   name_hash = FNV-1a 64 of the name's bytes
//               (h = 0xCBF29CE484222325; for each byte b: h = (h ^ b) * 0x100000001B3)
//   key      = Mix64(Mix64(uint64(seed) + G) ^ name_hash)
//   bits(i)  = Mix64(key + (uint64(i) + 1) * G)    (SplitMix64's i-th output
//                                                    from state `key`)
//   u24(i)   = (bits(i) >> 40) * 2^-24             in [0, 1), 24 bits (exact in float32)
//   u53(i)   = ((bits(i) >> 11) + 0.5) * 2^-53     in (0, 1)
//
// Kinds (values computed in float64, then rounded to float32, then to `dtype`):
//   zeros, ones      0, 1
//   uniform(scale)   u24 * scale                   in [0, scale), as
//                    jax.nn.initializers.uniform(scale) (note: not symmetric)
//   normal(stddev)   stddev * sqrt(2) * erfinv(2 * u53 - 1)
//                    (jax.nn.initializers.normal)
//   lecun_normal     truncated standard normal on [-2, 2], scaled by
//                    sqrt(1 / fan_in) / 0.87962566103423978 (the stddev of the
//                    standard normal truncated to [-2, 2]), exactly as JAX's
//                    variance_scaling(1.0, "fan_in", "truncated_normal"):
//                    t = sqrt(2) * erfinv(a + (b - a) * u53), a = erf(-sqrt(2)),
//                    b = erf(sqrt(2))  (inverse-CDF sampling, as
//                    jax.random.truncated_normal).
//   xavier_uniform   (2 * u24 - 1) * sqrt(6 / (fan_in + fan_out))
//                    in [-limit, limit) (variance_scaling(1, "fan_avg", "uniform")).
//
// Fans, as JAX's _compute_fans with in_axis=-2, out_axis=-1 (Flax kernels are
// [..., in, out]): receptive = product of shape[:-2]; fan_in = shape[-2] *
// receptive (= product of all dims but the last); fan_out = shape[-1] *
// receptive. Rank 1: fan_in = fan_out = shape[0]. Rank 0: 1.
//
// erfinv: Giles (2010) single-precision polynomial evaluated in float64. For
// w = -log(1 - x^2) < 5 (|x| < 0.9966) it is used as is (relative error
// < 1.3e-7, about one float32 ulp); for w >= 5 the result is refined by
// Newton steps on log(erfc(t)) - log(1 - |x|) to float64 precision. A
// reference using an exact erfinv (scipy.special.erfinv) agrees to ~2e-7
// relative: compare with rtol 1e-6, not bit for bit.
//
// Speed: boxes over 2^20 elements are split by rows over up to
// min(hardware threads, 8) std::threads; a 2048 x 8192 lecun_normal box takes
// ~0.3 s of CPU in total.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_INITIALIZERS_H_
#define MESHSERVE_COMMON_TENSOR_INITIALIZERS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"

namespace meshserve {

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  double stddev = 1.0;  // kNormal
  double scale = 1.0;   // kUniform: values in [0, scale)

  // From a model file's param (kind, stddev, scale).
  static InitSpec FromParam(const ParamDef& param);
};

// "zeros", "ones", "normal", "lecun_normal", "xavier_uniform", "uniform".
absl::string_view InitKindName(InitKind kind);
// \error kInvalidArgument naming `text` for an unknown kind.
absl::StatusOr<InitKind> ParseInitKind(absl::string_view text);

// The values of `box` (global coordinates inside full_shape) of the param, in
// `dtype` (a float dtype; zeros/ones also accept integer dtypes).
// \error kInvalidArgument: box rank != full_shape rank, negative dims,
//   stddev < 0 or non-finite, scale non-finite, a random kind with an integer
//   dtype; kOutOfRange: box not inside full_shape (naming both).
absl::StatusOr<Tensor> InitializeBox(const InitSpec& spec, int64_t seed,
                                     absl::string_view param_name,
                                     absl::Span<const int64_t> full_shape,
                                     const Box& box, DType dtype);

// The generator pieces above, exposed for tests and tools.
uint64_t InitMix64(uint64_t z);
uint64_t InitNameHash(absl::string_view name);  // FNV-1a 64
uint64_t InitKey(int64_t seed, absl::string_view name);
uint64_t InitBits(uint64_t key, int64_t flat_index);
// erfinv(x) for x in (-1, 1), as described above.
double ErfInv(double x);
// (fan_in, fan_out) of `shape` as described above.
std::pair<double, double> InitFans(absl::Span<const int64_t> shape);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_INITIALIZERS_H_
