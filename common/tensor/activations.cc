// activations.h: the kernels of activation_kernels.inc compiled three times,
// each with its own Ops and MS_ACT_TARGET (the `target` attribute every
// function of that copy carries), and a switch on the SmallMIsa argument.
//
// Thread-safety: pure functions.
#include "common/tensor/activations.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace meshserve {

// ---- portable: plain C++ over 8-float arrays.
#define MS_ACT_TARGET
namespace act_portable {
struct Ops {
  struct V {
    float v[8];
  };
  static constexpr int kLanes = 8;
  template <typename F>
  static V Each(F f) {
    V r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = f(i);
    return r;
  }
  static V Load(const float* p) {
    V x;
    std::memcpy(x.v, p, sizeof(x.v));
    return x;
  }
  static void Store(float* p, const V& x) { std::memcpy(p, x.v, sizeof(x.v)); }
  static V Set1(float s) { return Each([s](int) { return s; }); }
  static V Add(const V& a, const V& b) { return Each([&](int i) { return a.v[i] + b.v[i]; }); }
  static V Sub(const V& a, const V& b) { return Each([&](int i) { return a.v[i] - b.v[i]; }); }
  static V Mul(const V& a, const V& b) { return Each([&](int i) { return a.v[i] * b.v[i]; }); }
  static V Div(const V& a, const V& b) { return Each([&](int i) { return a.v[i] / b.v[i]; }); }
  // a b + c rounded twice: std::fma is a libm call (software without FMA
  // hardware, the only CPUs that run this copy unless it is forced), so
  // this copy differs from the x86 ones in the last bits.
  static V Fma(const V& a, const V& b, const V& c) {
    return Each([&](int i) { return a.v[i] * b.v[i] + c.v[i]; });
  }
  // x86 maxps/minps: b unless a > b (a < b), so a NaN in either gives b.
  static V Max(const V& a, const V& b) {
    return Each([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; });
  }
  static V Min(const V& a, const V& b) {
    return Each([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; });
  }
  static V IfNegative(const V& z, const V& a, const V& b) {
    return Each([&](int i) { return std::signbit(z.v[i]) ? a.v[i] : b.v[i]; });
  }
  static void CubicInFloat64(const V& x, double a, double b, V* hi, V* lo) {
    for (int i = 0; i < kLanes; ++i) {
      const double d = x.v[i];
      const double c = d * std::fma(b, d * d, a);
      hi->v[i] = static_cast<float>(c);
      lo->v[i] = static_cast<float>(c - hi->v[i]);
    }
  }
  // To nearest even for |a| < 2^22 (adding 1.5 * 2^23 leaves no fraction
  // bits); |a| <= 151 here. NaN stays NaN.
  static V Round(const V& a) {
    return Each([&](int i) { return (a.v[i] + 12582912.0f) - 12582912.0f; });
  }
  static void Pow2Split(const V& n, V* s1, V* s2) {
    for (int i = 0; i < kLanes; ++i) {
      // n is integral in [-150, 129] unless x was NaN (then y is NaN anyway).
      const int32_t k = n.v[i] == n.v[i] ? static_cast<int32_t>(n.v[i]) : 0;
      const int32_t k1 = k >> 1;
      const uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23;
      const uint32_t b2 = static_cast<uint32_t>(k - k1 + 127) << 23;
      std::memcpy(&s1->v[i], &b1, sizeof(float));
      std::memcpy(&s2->v[i], &b2, sizeof(float));
    }
  }
  static float ReduceMax(const V& a) { return *std::max_element(a.v, a.v + kLanes); }
  static float ReduceSum(const V& a) { return std::accumulate(a.v, a.v + kLanes, 0.0f); }
};
#include "common/tensor/activation_kernels.inc"
}  // namespace act_portable
#undef MS_ACT_TARGET

// ---- x86: the target attribute on every function (GCC and clang alike),
// MS_ACT_TARGET in activation_kernels.inc. The ops both widths share, P the
// intrinsics' prefix (_mm256 / _mm512) and BITS the vector width.
#define MS_X86_ACT_OPS(P, BITS)                                                            \
  using V = __m##BITS;                                                                     \
  static constexpr int kLanes = BITS / 32;                                                 \
  MS_ACT_TARGET static V Load(const float* p) { return P##_loadu_ps(p); }                 \
  MS_ACT_TARGET static void Store(float* p, V x) { P##_storeu_ps(p, x); }                 \
  MS_ACT_TARGET static V Set1(float s) { return P##_set1_ps(s); }                          \
  MS_ACT_TARGET static V Add(V a, V b) { return P##_add_ps(a, b); }                        \
  MS_ACT_TARGET static V Sub(V a, V b) { return P##_sub_ps(a, b); }                        \
  MS_ACT_TARGET static V Mul(V a, V b) { return P##_mul_ps(a, b); }                        \
  MS_ACT_TARGET static V Div(V a, V b) { return P##_div_ps(a, b); }                        \
  MS_ACT_TARGET static V Fma(V a, V b, V c) { return P##_fmadd_ps(a, b, c); }              \
  MS_ACT_TARGET static V Max(V a, V b) { return P##_max_ps(a, b); }                        \
  MS_ACT_TARGET static V Min(V a, V b) { return P##_min_ps(a, b); }                        \
  MS_ACT_TARGET static void Pow2Split(V n, V* s1, V* s2) {                                 \
    const __m##BITS##i k = P##_cvtps_epi32(n);                                             \
    const __m##BITS##i k1 = P##_srai_epi32(k, 1);                                          \
    const __m##BITS##i k2 = P##_sub_epi32(k, k1);                                          \
    const __m##BITS##i bias = P##_set1_epi32(127);                                         \
    *s1 = P##_castsi##BITS##_ps(P##_slli_epi32(P##_add_epi32(k1, bias), 23));              \
    *s2 = P##_castsi##BITS##_ps(P##_slli_epi32(P##_add_epi32(k2, bias), 23));              \
  }

// AVX2 + FMA: 8 floats per ymm.
#define MS_ACT_TARGET __attribute__((target("avx2,fma")))
namespace act_avx2 {
struct Ops {
  MS_X86_ACT_OPS(_mm256, 256)
  MS_ACT_TARGET static V IfNegative(V z, V a, V b) { return _mm256_blendv_ps(b, a, z); }
  MS_ACT_TARGET static V Round(V a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  MS_ACT_TARGET static void CubicInFloat64(V x, double a, double b, V* hi, V* lo) {
    __m128 h[2], l[2];
    for (int i = 0; i < 2; ++i) {
      const __m256d d =
          _mm256_cvtps_pd(i == 0 ? _mm256_castps256_ps128(x) : _mm256_extractf128_ps(x, 1));
      const __m256d c = _mm256_mul_pd(
          d, _mm256_fmadd_pd(_mm256_set1_pd(b), _mm256_mul_pd(d, d), _mm256_set1_pd(a)));
      h[i] = _mm256_cvtpd_ps(c);
      l[i] = _mm256_cvtpd_ps(_mm256_sub_pd(c, _mm256_cvtps_pd(h[i])));
    }
    *hi = _mm256_insertf128_ps(_mm256_castps128_ps256(h[0]), h[1], 1);
    *lo = _mm256_insertf128_ps(_mm256_castps128_ps256(l[0]), l[1], 1);
  }
  MS_ACT_TARGET static float ReduceMax(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  MS_ACT_TARGET static float ReduceSum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};
#include "common/tensor/activation_kernels.inc"
}  // namespace act_avx2
#undef MS_ACT_TARGET

// AVX-512F: 16 floats per zmm. GCC 12 warns that avx512fintrin.h's own
// `__Y` placeholder "may be used uninitialized" (a false positive), so the
// warning is off from here to the end of the file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define MS_ACT_TARGET __attribute__((target("avx512f,fma")))
namespace act_avx512 {
struct Ops {
  MS_X86_ACT_OPS(_mm512, 512)
  MS_ACT_TARGET static V IfNegative(V z, V a, V b) {
    const __mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(z), _mm512_setzero_si512());
    return _mm512_mask_blend_ps(neg, b, a);
  }
  MS_ACT_TARGET static V Round(V a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  MS_ACT_TARGET static V Join(__m256 low, __m256 high) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(low)),
                                               _mm256_castps_pd(high), 1));
  }
  MS_ACT_TARGET static void CubicInFloat64(V x, double a, double b, V* hi, V* lo) {
    __m256 h[2], l[2];
    for (int i = 0; i < 2; ++i) {
      const __m256 half =
          i == 0 ? _mm512_castps512_ps256(x)
                 : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
      const __m512d d = _mm512_cvtps_pd(half);
      const __m512d c = _mm512_mul_pd(
          d, _mm512_fmadd_pd(_mm512_set1_pd(b), _mm512_mul_pd(d, d), _mm512_set1_pd(a)));
      h[i] = _mm512_cvtpd_ps(c);
      l[i] = _mm512_cvtpd_ps(_mm512_sub_pd(c, _mm512_cvtps_pd(h[i])));
    }
    *hi = Join(h[0], h[1]);
    *lo = Join(l[0], l[1]);
  }
  MS_ACT_TARGET static float ReduceMax(V a) { return _mm512_reduce_max_ps(a); }
  MS_ACT_TARGET static float ReduceSum(V a) { return _mm512_reduce_add_ps(a); }
};
#include "common/tensor/activation_kernels.inc"
}  // namespace act_avx512
#undef MS_ACT_TARGET
#undef MS_X86_ACT_OPS

#define MS_ACTIVATION_DISPATCH(Name, Kernel)                           \
  void Name(const float* x, int64_t n, float* y, SmallMIsa isa) {      \
    switch (isa) {                                                     \
      case SmallMIsa::kAvx512: return act_avx512::Kernel(x, n, y);     \
      case SmallMIsa::kAvx2: return act_avx2::Kernel(x, n, y);         \
      case SmallMIsa::kPortable: break;                                \
    }                                                                  \
    act_portable::Kernel(x, n, y);                                     \
  }
MS_ACTIVATION_DISPATCH(ExpF32, Exp)
MS_ACTIVATION_DISPATCH(GeluTanhF32, GeluTanh)
MS_ACTIVATION_DISPATCH(SiluF32, Silu)
MS_ACTIVATION_DISPATCH(SigmoidF32, Sigmoid)
MS_ACTIVATION_DISPATCH(SoftmaxRowF32, SoftmaxRow)
#undef MS_ACTIVATION_DISPATCH
#pragma GCC diagnostic pop

}  // namespace meshserve
