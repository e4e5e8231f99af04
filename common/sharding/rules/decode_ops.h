// jax.nn.dot_product_attention(query, key, value, is_causal=True, scale=s)
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
// Thread-safety: pure function.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_ATTENTION_H_
#define MESHSERVE_COMMON_SHARDING_RULES_ATTENTION_H_

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// \error kInvalidArgument naming the operands: ranks other than 4, integer
//   dtypes, dtypes that differ, B/H/K/S mismatches, N not a multiple of K,
//   and each sharding condition above.
absl::StatusOr<ArrayType> AttentionRule(const ArrayType& query, const ArrayType& key,
                                        const ArrayType& value);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_ATTENTION_H_
