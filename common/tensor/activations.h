// Vectorised float32 activation and softmax kernels over contiguous arrays:
// the inner loops of Gelu / Silu / Softmax (elementwise.cc) and of anyone who
// holds a float32 row (attention's softmax, sampling).
//
// Math. Every kernel is built on one exp:
//   exp(x): n = round(x log2 e), r = x - n ln2 (ln2 split in two, Cody-Waite),
//           exp(r) by Cephes' degree-6 polynomial on |r| <= ln2 / 2, times
//           2^n applied as two factors 2^(n >> 1) 2^(n - (n >> 1)) so that
//           n in [-166, 129] never leaves the exponent range: results
//           overflow to +inf past ~88.72 and go through the subnormals to 0
//           below ~-87.3 as libm's expf does. x is clamped to [-115, 89]
//           first (NaN passes through the clamp and comes out NaN).
//   gelu (tanh form, jax.nn.gelu(approximate=True), HF "gelu_new" of GPT-2):
//           0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
//           as x / (1 + exp(-2u)) (the same function: 1 + tanh(u) =
//           2 / (1 + exp(-2u))), which has no cancellation for x << 0 where
//           the tanh form loses all its digits in float32.
//   silu    x / (1 + exp(-x));   sigmoid  1 / (1 + exp(-x)).
//   softmax y = exp(x - max(x)) / sum(exp(x - max(x))) over one row.
// Accuracy (activations_test: dense grids over [-110, 110], +-1e-38..1e38
// and the float edges, every ISA), against the float64 formulas, for normal
// results: exp within 2 ulp, gelu / silu / sigmoid within 4 ulp (measured
// 1.2e-7, 2.4e-7, 2.3e-7, 2.0e-7 relative; the tests assert 2.5e-7 for exp
// and 1e-6 for the others), and x exp(-|z|) is rounded once so a normal
// result stays accurate where exp itself is subnormal; subnormal results
// within 4 subnormal ulps. The float32 libm forms they replace are worse:
// 0.5 x (1 + tanhf(u)) loses every digit for x < -4 (1 + tanh cancels).
// Specials: NaN -> NaN; exp(+inf) = inf, exp(-inf) = 0; gelu/silu(+inf) =
// inf, (-inf) = NaN (-inf x 0, as the formula gives in float64 and libm),
// (x << 0) = -0; sigmoid(+-inf) = 1, 0.
//
// ISA: the kernels are compiled for AVX-512F, AVX2+FMA and portable C++
// (activation_kernels.inc included three times, each copy's functions with
// their own `target` attribute) and the `isa` argument picks one; the default is DefaultSmallMIsa() (gemm_small_m.h:
// the best this CPU has, capped by SetSmallMIsaCap / MESHSERVE_GEMM_ISA).
// Passing an ISA the CPU does not support (SmallMIsaSupported) is undefined.
//
// y may equal x (in place); otherwise the arrays must not overlap.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_ACTIVATIONS_H_
#define MESHSERVE_COMMON_TENSOR_ACTIVATIONS_H_

#include <cstdint>

#include "common/tensor/gemm_small_m.h"

namespace meshserve {

void ExpF32(const float* x, int64_t n, float* y, SmallMIsa isa = DefaultSmallMIsa());
void GeluTanhF32(const float* x, int64_t n, float* y, SmallMIsa isa = DefaultSmallMIsa());
void SiluF32(const float* x, int64_t n, float* y, SmallMIsa isa = DefaultSmallMIsa());
void SigmoidF32(const float* x, int64_t n, float* y, SmallMIsa isa = DefaultSmallMIsa());
// One row of n >= 1 entries; a row of all -inf gives NaN (as jax.nn.softmax).
void SoftmaxRowF32(const float* x, int64_t n, float* y, SmallMIsa isa = DefaultSmallMIsa());

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_ACTIVATIONS_H_
