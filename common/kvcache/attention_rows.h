// The two inner loops of CachedAttention's decode path, over the rows of one
// block (a contiguous [rows, d] matrix), compiled for AVX-512, AVX2+FMA and
// plain C++, the widest the CPU supports picked once (__builtin_cpu_supports):
//   ScoreRows:      scores[r] = scale * (q . keys[r, :])           r < rows
//   AccumulateRows: o[:] += sum_r weights[r] * values[r, :]
// and, for any caller (the prefill path, other attention kernels):
//   SoftmaxRowPrefix: row[0, valid) <- softmax(row[0, valid)) with the max
//                     subtracted; row[valid, width) <- 0 (causal rows).
// Sums run in float32 (lane-wise partial sums, then their sum), so results may
// differ from a sequential loop by float rounding.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_KVCACHE_ATTENTION_ROWS_H_
#define MESHSERVE_COMMON_KVCACHE_ATTENTION_ROWS_H_

#include <cstdint>
#include <vector>

namespace meshserve {

// See file comment. Precondition: 1 <= valid <= width.
void SoftmaxRowPrefix(float* row, int64_t valid, int64_t width);

namespace kv_internal {

void ScoreRows(const float* q, const float* keys, int64_t rows, int64_t d, float scale,
               float* scores);
void AccumulateRows(const float* weights, const float* values, int64_t rows, int64_t d,
                    float* o);
// "avx512", "avx2" or "generic": the variant in use.
const char* AttentionRowsIsa();

// Every variant this CPU can run, the one in use first (for tests).
struct AttentionRowsVariant {
  const char* isa;
  void (*score)(const float* q, const float* keys, int64_t rows, int64_t d, float scale,
                float* scores);
  void (*accumulate)(const float* weights, const float* values, int64_t rows, int64_t d,
                     float* o);
};
std::vector<AttentionRowsVariant> SupportedAttentionRowsVariants();

}  // namespace kv_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_KVCACHE_ATTENTION_ROWS_H_
