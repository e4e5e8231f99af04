// ScoreRows / AccumulateRows (see attention_rows.h): three variants and the
// dispatch. The vector variants use target attributes (GCC and clang) on
// their wrappers only, so the rest of the tree keeps its baseline ISA.
#include "common/kvcache/attention_rows.h"

#include <algorithm>
#include <cmath>


namespace meshserve {
namespace kv_internal {
namespace {

void ScoreRowsGeneric(const float* q, const float* keys, int64_t rows, int64_t d, float scale,
                      float* scores) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* k = keys + r * d;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * k[i + j];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < d; ++i) s += q[i] * k[i];
    scores[r] = scale * s;
  }
}

void AccumulateRowsGeneric(const float* weights, const float* values, int64_t rows, int64_t d,
                           float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    const float w = weights[r];
    const float* v = values + r * d;
    for (int64_t i = 0; i < d; ++i) o[i] += w * v[i];
  }
}

// The vector variants: one body over GCC/clang vector extensions of L lanes,
// always inlined into a wrapper compiled for the ISA (so the vectors are ymm
// or zmm registers and `acc += a * b` is one FMA: GNU mode contracts).
// V: L floats in a register; U: the same read or written at any float
// address (as immintrin.h's __m256_u), through At(p). No function returns a
// vector (that would change the ABI outside the ISA wrappers).
template <int L>
struct Lanes {
  typedef float V __attribute__((vector_size(L * sizeof(float))));
  typedef float U __attribute__((vector_size(L * sizeof(float)), aligned(4), __may_alias__));
  static const U* At(const float* p) { return reinterpret_cast<const U*>(p); }
  static U* At(float* p) { return reinterpret_cast<U*>(p); }
};

template <int L>
__attribute__((always_inline)) inline void ScoreRowsVec(const float* q, const float* keys,
                                                        int64_t rows, int64_t d, float scale,
                                                        float* scores) {
  using W = Lanes<L>;
  for (int64_t r = 0; r < rows; ++r) {
    const float* k = keys + r * d;
    typename W::V acc0 = {}, acc1 = {};
    int64_t i = 0;
    for (; i + 2 * L <= d; i += 2 * L) {
      acc0 += *W::At(q + i) * *W::At(k + i);
      acc1 += *W::At(q + i + L) * *W::At(k + i + L);
    }
    if (i + L <= d) {
      acc0 += *W::At(q + i) * *W::At(k + i);
      i += L;
    }
    acc0 += acc1;
    float s = 0.0f;
    for (int j = 0; j < L; ++j) s += acc0[j];
    for (; i < d; ++i) s += q[i] * k[i];
    scores[r] = scale * s;
  }
}

template <int L>
__attribute__((always_inline)) inline void AccumulateRowsVec(const float* weights,
                                                             const float* values, int64_t rows,
                                                             int64_t d, float* o) {
  using W = Lanes<L>;
  int64_t i = 0;
  for (; i + L <= d; i += L) {  // o[i, i + L) stays in a register over the rows
    typename W::V acc = *W::At(o + i);
    for (int64_t r = 0; r < rows; ++r) acc += weights[r] * *W::At(values + r * d + i);
    *W::At(o + i) = acc;
  }
  for (; i < d; ++i) {
    for (int64_t r = 0; r < rows; ++r) o[i] += weights[r] * values[r * d + i];
  }
}

// ScoreRows<Isa> and AccumulateRows<Isa>: the bodies above compiled for `isa`.
#define MS_KV_ROWS_VARIANT(Isa, isa, lanes)                                                   \
  __attribute__((target(isa))) void ScoreRows##Isa(const float* q, const float* keys,        \
                                                   int64_t rows, int64_t d, float scale,     \
                                                   float* scores) {                          \
    ScoreRowsVec<lanes>(q, keys, rows, d, scale, scores);                                    \
  }                                                                                          \
  __attribute__((target(isa))) void AccumulateRows##Isa(                                     \
      const float* weights, const float* values, int64_t rows, int64_t d, float* o) {        \
    AccumulateRowsVec<lanes>(weights, values, rows, d, o);                                   \
  }
MS_KV_ROWS_VARIANT(Avx2, "avx2,fma", 8)
MS_KV_ROWS_VARIANT(Avx512, "avx512f", 16)
#undef MS_KV_ROWS_VARIANT

const AttentionRowsVariant& Chosen() {
  static const AttentionRowsVariant variant = SupportedAttentionRowsVariants().front();
  return variant;
}

}  // namespace

std::vector<AttentionRowsVariant> SupportedAttentionRowsVariants() {
  __builtin_cpu_init();
  std::vector<AttentionRowsVariant> out;
  if (__builtin_cpu_supports("avx512f")) {
    out.push_back({"avx512", &ScoreRowsAvx512, &AccumulateRowsAvx512});
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    out.push_back({"avx2", &ScoreRowsAvx2, &AccumulateRowsAvx2});
  }
  out.push_back({"generic", &ScoreRowsGeneric, &AccumulateRowsGeneric});
  return out;
}

void ScoreRows(const float* q, const float* keys, int64_t rows, int64_t d, float scale,
               float* scores) {
  Chosen().score(q, keys, rows, d, scale, scores);
}

void AccumulateRows(const float* weights, const float* values, int64_t rows, int64_t d,
                    float* o) {
  Chosen().accumulate(weights, values, rows, d, o);
}

const char* AttentionRowsIsa() { return Chosen().isa; }

}  // namespace kv_internal

void SoftmaxRowPrefix(float* row, int64_t valid, int64_t width) {
  float mx = row[0];
  for (int64_t j = 1; j < valid; ++j) mx = std::max(mx, row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < valid; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
  std::fill(row + valid, row + width, 0.0f);
}

namespace kv_internal {

}  // namespace kv_internal
}  // namespace meshserve
