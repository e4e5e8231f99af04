// GemmSmallM (see gemm_small_m.h): the kernels of gemm_small_m_kernels.inc
// compiled three times, each inside a `#pragma GCC target` region with its
// own Ops, and a run-time choice between them.
#include "common/tensor/gemm_small_m.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/base/thread_pool.h"
#include "common/tensor/bfloat16.h"

namespace meshserve {

// ---- portable: plain C++ over 8-float arrays (the compiler vectorises it
// for whatever the baseline ISA is).
namespace gemm_portable {
struct Ops {
  struct V {
    float v[8];
  };
  static constexpr int kLanes = 8;
  static constexpr int kNaturalMR = 4, kNaturalNR = 2;
  static constexpr int kTransposedMR = 2, kTransposedNR = 4;
  static V Zero() { return V{}; }
  static V Load(const float* p) {
    V x;
    std::memcpy(x.v, p, sizeof(x.v));
    return x;
  }
  static V Load(const uint16_t* p) {
    V x;
    for (int i = 0; i < kLanes; ++i) x.v[i] = BFloat16ToFloat(p[i]);
    return x;
  }
  static void Store(float* p, const V& x) { std::memcpy(p, x.v, sizeof(x.v)); }
  static V Fma(const V& w, float s, V acc) {
    for (int i = 0; i < kLanes; ++i) acc.v[i] += w.v[i] * s;
    return acc;
  }
  static V FmaV(const V& x, const V& y, V acc) {
    for (int i = 0; i < kLanes; ++i) acc.v[i] += x.v[i] * y.v[i];
    return acc;
  }
  static float Sum(const V& x) {
    float s = 0;
    for (int i = 0; i < kLanes; ++i) s += x.v[i];
    return s;
  }
};
#include "common/tensor/gemm_small_m_kernels.inc"
}  // namespace gemm_portable

// ---- AVX2 + FMA: 8 floats per ymm; 16 registers (tiles of 12 accumulators).
#if defined(__clang__)  // clang ignores GCC's target pragma (sanitizer and fuzz builds)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace gemm_avx2 {
struct Ops {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kNaturalMR = 4, kNaturalNR = 3;
  static constexpr int kTransposedMR = 2, kTransposedNR = 4;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V Fma(V w, float s, V acc) { return _mm256_fmadd_ps(w, _mm256_set1_ps(s), acc); }
  static V FmaV(V x, V y, V acc) { return _mm256_fmadd_ps(x, y, acc); }
  static float Sum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#include "common/tensor/gemm_small_m_kernels.inc"
}  // namespace gemm_avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---- AVX-512F: 16 floats per zmm; 32 registers (tiles of 24 accumulators).
// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized on its own
// _mm512_undefined_* placeholders (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#endif
namespace gemm_avx512 {
struct Ops {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kNaturalMR = 8, kNaturalNR = 3;
  static constexpr int kTransposedMR = 4, kTransposedNR = 4;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V Fma(V w, float s, V acc) { return _mm512_fmadd_ps(w, _mm512_set1_ps(s), acc); }
  static V FmaV(V x, V y, V acc) { return _mm512_fmadd_ps(x, y, acc); }
  static float Sum(V x) { return _mm512_reduce_add_ps(x); }
};
#include "common/tensor/gemm_small_m_kernels.inc"
}  // namespace gemm_avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace {

using ColumnsFn = void (*)(const float*, int64_t, int64_t, const SmallMWeights&, int64_t,
                           int64_t, int64_t, float*);

ColumnsFn ColumnsFor(SmallMIsa isa) {
  switch (isa) {
    case SmallMIsa::kAvx512:
      return gemm_avx512::Columns;
    case SmallMIsa::kAvx2:
      return gemm_avx2::Columns;
    case SmallMIsa::kPortable:
      break;
  }
  return gemm_portable::Columns;
}

// Columns per tile of `isa`'s kernel for this layout: thread ranges start on
// a tile boundary so only the last range has a scalar tail.
int64_t TileColumns(SmallMIsa isa, bool transposed) {
  switch (isa) {
    case SmallMIsa::kAvx512:
      return transposed ? gemm_avx512::Ops::kTransposedNR
                        : gemm_avx512::Ops::kNaturalNR * gemm_avx512::Ops::kLanes;
    case SmallMIsa::kAvx2:
      return transposed ? gemm_avx2::Ops::kTransposedNR
                        : gemm_avx2::Ops::kNaturalNR * gemm_avx2::Ops::kLanes;
    case SmallMIsa::kPortable:
      break;
  }
  return transposed ? gemm_portable::Ops::kTransposedNR
                    : gemm_portable::Ops::kNaturalNR * gemm_portable::Ops::kLanes;
}

// The helper threads of GemmSmallM (the calling thread takes a share too).
ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(/*max_threads=*/64);
  return *pool;
}

}  // namespace

const char* SmallMIsaName(SmallMIsa isa) {
  switch (isa) {
    case SmallMIsa::kAvx512:
      return "avx512";
    case SmallMIsa::kAvx2:
      return "avx2";
    case SmallMIsa::kPortable:
      break;
  }
  return "portable";
}

bool SmallMIsaSupported(SmallMIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case SmallMIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case SmallMIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SmallMIsa::kPortable:
      break;
  }
  return true;
}

SmallMIsa CappedSmallMIsa(absl::string_view cap) {
  const std::string lower = absl::AsciiStrToLower(cap);
  SmallMIsa isa = SmallMIsa::kAvx512;
  if (lower == "avx2") isa = SmallMIsa::kAvx2;
  if (lower == "portable") isa = SmallMIsa::kPortable;
  while (!SmallMIsaSupported(isa)) isa = static_cast<SmallMIsa>(static_cast<int>(isa) - 1);
  return isa;
}

namespace {
// The ISA DefaultSmallMIsa returns, as an int (-1: not chosen yet).
std::atomic<int>& ChosenIsa() {
  static std::atomic<int> chosen{-1};
  return chosen;
}
}  // namespace

void SetSmallMIsaCap(absl::string_view cap) {
  ChosenIsa().store(static_cast<int>(CappedSmallMIsa(cap)), std::memory_order_relaxed);
}

SmallMIsa DefaultSmallMIsa() {
  int isa = ChosenIsa().load(std::memory_order_relaxed);
  if (isa < 0) {
    isa = static_cast<int>(CappedSmallMIsa(""));
    int expected = -1;  // a concurrent SetSmallMIsaCap wins
    if (!ChosenIsa().compare_exchange_strong(expected, isa, std::memory_order_relaxed)) {
      isa = expected;
    }
  }
  return static_cast<SmallMIsa>(isa);
}

void WidenBFloat16(const uint16_t* src, int64_t n, float* dst, SmallMIsa isa) {
  switch (isa) {
    case SmallMIsa::kAvx512:
      return gemm_avx512::WidenBFloat16(src, n, dst);
    case SmallMIsa::kAvx2:
      return gemm_avx2::WidenBFloat16(src, n, dst);
    case SmallMIsa::kPortable:
      break;
  }
  gemm_portable::WidenBFloat16(src, n, dst);
}

void GemmSmallM(const float* a, int64_t m, int64_t k, const SmallMWeights& w, int64_t n,
                float* c, int threads, SmallMIsa isa) {
  const ColumnsFn columns = ColumnsFor(isa);
  const int64_t tile = TileColumns(isa, w.transposed);
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 20;  // multiply-adds
  const int64_t by_work = std::max<int64_t>(1, m * n * k / kMinWorkPerThread);
  const int64_t by_tiles = std::max<int64_t>(1, n / tile);
  const int64_t parts = std::min<int64_t>({std::max(threads, 1), by_work, by_tiles});
  if (parts == 1) return columns(a, m, k, w, n, 0, n, c);
  // Ranges of whole tiles; the last range ends at n.
  const int64_t per_part = (n / tile + parts - 1) / parts * tile;
  absl::BlockingCounter done(static_cast<int>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t jb = std::min(n, p * per_part);
    const int64_t je = p + 1 == parts ? n : std::min(n, (p + 1) * per_part);
    Pool().Schedule([=, &w, &done] {
      if (jb < je) columns(a, m, k, w, n, jb, je, c);
      done.DecrementCount();
    });
  }
  columns(a, m, k, w, n, 0, std::min(n, per_part), c);
  done.Wait();
}

}  // namespace meshserve
