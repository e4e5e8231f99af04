// Small-M GEMM that streams the weight once: C[M, N] = A[M, K] . W for
// small M (a serving batch), W float32 or bfloat16, in layout [K, N] ("natural",
// jnp.dot(a, w)) or [N, K] ("transposed", jnp.dot(a, w.T)).
//
//   C[m, n] = sum_k A[m, k] * float32(W[k, n])        (natural)
//   C[m, n] = sum_k A[m, k] * float32(W[n, k])        (transposed)
//
// Why: cblas_sgemm packs the whole weight into its own panel layout on every
// call. For a serving batch (M of 1..16) that copy costs more than the GEMM
// (OpenBLAS 0.3.21 at M = 1: 85% of the time in sgemm_itcopy); the product
// itself is memory-bound, so the right kernel reads each weight element from
// memory once, for all M rows, and nothing else.
//
// Numerics (as jax.lax.dot_general with preferred_element_type=float32):
// activations stay float32, bfloat16 weights are widened in registers
// (bf16 -> f32 is exact: a 16-bit shift), products are accumulated in float32
// with FMA. No rounding of the activations to bfloat16 happens, so a bf16
// weight gives the same result as its exact float32 widening (up to summation
// order). vdpbf16ps (AVX512_BF16) is not used: it would round the activations
// to bfloat16 (relative error 2^-9 per product).
//
// Natural layout, per block of 64 register tiles of columns (3072 for
// AVX-512, 1024 for AVX2): the block's M x width piece of C accumulates in a
// local buffer (row stride padded off a power of two, so rows do not share
// cache sets); the weight rows are streamed 8 at a time (64 when M > 8), each
// a contiguous run of the block's columns, prefetched one chunk ahead. Each
// register tile (MR rows x NR vectors: 8 x 3 zmm for AVX-512, 4 x 3 ymm for
// AVX2) reads its weights from memory for the first MR rows and leaves them
// widened in a small L1 buffer for the other row groups, so memory sees each
// weight element once. A block's last columns take a tile of fewer vectors;
// only the last (< one vector) columns of a range run a scalar loop. A is
// copied k-major per row group (M x K floats) so a tile's broadcasts read one
// contiguous run.
// Transposed layout: each group of NR weight rows is dotted with every
// activation row (MR at a time) over contiguous K; the NR rows stay in L1/L2.
// Work is O(M N K) multiply-adds; extra memory O(M K + M * 4096) floats.
//
// Kernels (SmallMIsa), chosen at run time: kAvx512 (avx512f), kAvx2
// (avx2 + fma) and kPortable (plain C++, any CPU). DefaultSmallMIsa() is the
// best one this CPU supports; SetSmallMIsaCap("portable"|"avx2"|"avx512")
// caps it (an unsupported choice falls back to the best supported one below
// it), so the fallback can be forced: the binaries' mains pass
// MESHSERVE_GEMM_ISA to it.
//
// Threads: the N columns are split over `threads` workers (the calling thread
// plus a process-wide pool) when the product is large enough to pay for the
// hand-off (>= 2^20 multiply-adds per thread).
//
// Thread-safety: thread-safe (pure apart from the shared pool, which is, and
// the ISA cap, an atomic).
#ifndef MESHSERVE_COMMON_TENSOR_GEMM_SMALL_M_H_
#define MESHSERVE_COMMON_TENSOR_GEMM_SMALL_M_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/base/dtype.h"

namespace meshserve {

enum class SmallMIsa { kPortable, kAvx2, kAvx512 };

const char* SmallMIsaName(SmallMIsa isa);
// Whether this CPU can run `isa` (kPortable always).
bool SmallMIsaSupported(SmallMIsa isa);
// The best supported ISA at or below `cap` ("portable", "avx2", "avx512",
// case-insensitive; anything else means no cap).
SmallMIsa CappedSmallMIsa(absl::string_view cap);
// The ISA DotGeneral uses: CappedSmallMIsa of the last SetSmallMIsaCap, or
// the best supported one when it was never called.
SmallMIsa DefaultSmallMIsa();
// Caps DefaultSmallMIsa from now on (CappedSmallMIsa(cap); "" lifts the cap).
void SetSmallMIsaCap(absl::string_view cap);

// The largest M for which DotGeneral picks this kernel with `isa`, by
// weight dtype (measured crossovers, docs/kernels.md; the kernel itself is
// correct for any M): float32 weights against cblas_sgemm, 16 rows with
// AVX-512 (8 x 3-vector tiles), 8 otherwise; bfloat16 weights against
// widening by panels + cblas_sgemm, 128 rows.
constexpr int64_t kSmallMMaxFloat32Avx512 = 16;
constexpr int64_t kSmallMMaxFloat32 = 8;
constexpr int64_t kSmallMMaxBFloat16 = 128;
inline int64_t SmallMMaxRows(DType weights, SmallMIsa isa) {
  if (weights == DType::kBFloat16) return kSmallMMaxBFloat16;
  return isa == SmallMIsa::kAvx512 ? kSmallMMaxFloat32Avx512 : kSmallMMaxFloat32;
}

// The weight operand: `data` holds the elements of `dtype` (kFloat32 or
// kBFloat16) in layout [K, N], or [N, K] when `transposed`, each row
// `row_stride` elements after the previous one (0: dense, i.e. N, or K when
// transposed; a larger stride reads a block of columns of a wider matrix in
// place, as DotGeneralInPlace's param slices).
struct SmallMWeights {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  bool transposed = false;
  int64_t row_stride = 0;
};

// c[M, N] (row stride N) = a[M, K] (row stride K) . w. Preconditions (the
// caller's, unchecked): m, k, n >= 1; w.dtype is kFloat32 or kBFloat16;
// w.row_stride is 0 or at least the row length (N, or K when transposed);
// SmallMIsaSupported(isa); buffers do not overlap.
void GemmSmallM(const float* a, int64_t m, int64_t k, const SmallMWeights& w, int64_t n,
                float* c, int threads, SmallMIsa isa);

// dst[i] = BFloat16ToFloat(src[i]) for i < n with `isa`'s vectors (the
// widening-by-panels path of DotGeneral for larger M). Precondition:
// SmallMIsaSupported(isa); src and dst do not overlap.
void WidenBFloat16(const uint16_t* src, int64_t n, float* dst, SmallMIsa isa);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_GEMM_SMALL_M_H_
