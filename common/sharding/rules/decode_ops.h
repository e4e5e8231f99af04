// The rules of the ops a generation step runs (common/program/decode_step.h):
// attention (whose keys and values the workers cache), select_rows and sample.
//
// attention = jax.nn.dot_product_attention(query, key, value, is_causal=True, scale=s)
// (jax/_src/nn/functions.py): query [B, T, N, H], key and value [B, S, K, H],
// N = K * G (grouped-query attention: query head n reads kv head n / G, the
// reshape of query to [B, T, K, G, H] that JAX's xla implementation does).
// The result is [B, T, N, H].
//
// Sharding (OUR READING of the einsums 'BTKGH,BSKH->BKGTS' and
// 'BKGTS,BSKH->BTKGH' that JAX's implementation runs, restricted to the
// layouts that need no collective): key and value have one sharding; the
// batch dim is sharded alike on all three; the head dims are sharded alike
// (N and K by the same axes, which must divide K, so each shard holds whole
// groups); T, S and H are unsharded (a sharded sequence or head_dim would
// contract or reduce over a sharded dim). The result takes query's type.
//   q f32[8@data,128,12@model,64], k/v f32[8@data,128,12@model,64]
//     -> f32[8@data,128,12@model,64]
// This is the layout meshserve's KV cache uses: each worker keeps the keys
// and values of the heads it holds (common/kvcache).
//
// select_rows(x [B, T, D], rows=R) -> [B, R, D]: jnp.take(x, idx, axis=1)
//   with R indices (a generation step's sampled rows; outside one, the last R
//   rows). The row dim must be unsharded; the result keeps x's other entries.
// sample(logits [B, R, V], vocab_size) -> float32 [B, R, kSampleRecordWidth]:
//   per row the sampled token and its log-probability, then up to
//   kMaxLogprobs (id, logprob) pairs (common/sampling/sampler.h); ids are
//   exact in float32 below 2^24. The vocabulary dim is gathered before
//   sampling (any sharding is accepted, and unreduced logits: the gather
//   reduces them, as an LM head sharded over its features leaves them); the
//   result keeps B's and R's entries.
//
// Thread-safety: pure function.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_DECODE_OPS_H_
#define MESHSERVE_COMMON_SHARDING_RULES_DECODE_OPS_H_

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// \error kInvalidArgument naming the operands: ranks other than 4, integer
//   dtypes, dtypes that differ, B/H/K/S mismatches, N not a multiple of K,
//   and each sharding condition above.
absl::StatusOr<ArrayType> AttentionRule(const ArrayType& query, const ArrayType& key,
                                        const ArrayType& value);

// \error kInvalidArgument: rank other than 3, rows < 1 or > T, a sharded row dim.
absl::StatusOr<ArrayType> SelectRowsRule(const ArrayType& input, int64_t rows);

// 2 + 2 * 20: token, logprob, then 20 (id, logprob) pairs.
inline constexpr int64_t kSampleRecordWidth = 42;

// \error kInvalidArgument: rank other than 3, a non-float dtype, vocab_size
//   outside [1, V], V >= 2^24.
absl::StatusOr<ArrayType> SampleRule(const ArrayType& logits, int64_t vocab_size);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_DECODE_OPS_H_
