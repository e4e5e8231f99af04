// The kernels of the generation ops (compute_step.h: attention, select_rows,
// sample) and the position table of a generation step, on local tensors.
//
//   CausalAttention     q [B, T, N, H], k and v [B, S, K, H] (N = G * K):
//                       out[b, t, n] = softmax_j(scale q[b,t,n] . k[b,j,n/G])
//                       v[b,j,n/G] over j <= t + S - T (causal; the queries
//                       are the last T of the S positions). Two sgemm calls
//                       per (b, n); outside generation.
//   CachedStepAttention the same over a worker's KV cache for the packed
//                       tokens of a generation step (B = 1, T token slots):
//                       appends k, v at each span's positions, attends over
//                       the sequence's cached keys (common/kvcache); padding
//                       slots give zero rows.
//   SelectRows          x [B, T, D] -> [B, R, D]: the step's sampled rows
//                       (DecodeLayout::row_slots), or the last R rows without
//                       a step.
//   SampleRows          logits [B, R, V] -> float32 [B, R, kSampleRecordWidth]
//                       per row: token id, its logprob (0 when num_logprobs
//                       is -1), then the top num_logprobs (id, logprob)
//                       pairs, logprob desc (OpenAI completions' `logprobs:
//                       N`), pairs past min(N, the valid ids) id -1 and
//                       logprob 0; a padding row is token -1. Ids in
//                       [vocab_size, V) (the padding of a sharded head) are
//                       never sampled nor listed. Each row samples with its
//                       span's parameters at position past_len + num_tokens
//                       (common/sampling/sampler.h); without a step, greedy
//                       at position r.
//
// \error kInvalidArgument naming the shapes and values; the KV cache's errors
//   (kResourceExhausted when a sequence's blocks cannot be reserved).
//
// Thread-safety: pure functions, except that CachedStepAttention writes the
// cache (thread-safe per sequence, common/kvcache/kv_cache.h).
#ifndef MESHSERVE_COMMON_PROGRAM_DECODE_KERNELS_H_
#define MESHSERVE_COMMON_PROGRAM_DECODE_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kvcache/kv_cache.h"
#include "common/program/decode_step.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// Index t: the position of token slot t (0 for padding slots).
std::vector<int64_t> SlotPositions(const DecodeLayout& layout);

absl::StatusOr<Tensor> CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                       float scale);

absl::StatusOr<Tensor> CachedStepAttention(KvCache& cache, int64_t layer, const Tensor& q,
                                           const Tensor& k, const Tensor& v,
                                           const DecodeLayout& layout, float scale);

// `layout` may be null (outside generation).
absl::StatusOr<Tensor> SelectRows(const Tensor& x, int64_t rows, const DecodeLayout* layout);

absl::StatusOr<Tensor> SampleRows(const Tensor& logits, int64_t vocab_size,
                                  const DecodeLayout* layout);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_DECODE_KERNELS_H_
