// Attention over the paged KV cache for one layer of one step of a batch
// packed as tokens (prefill chunks and decode tokens of several sequences in
// one call, as continuous batching runs them).
//
// Inputs (float32): q [N, Hq, D], k_new and v_new [N, Hkv, D], and spans
// (kv_cache.h KvSpan) that tile the N rows in order: span i covers rows
// token_begin .. token_begin + num_tokens - 1, its token_begin is the end of
// span i-1 (0 for the first), and the last span ends at N. Row t of span s
// sits at position pos(t) = s.past_len + (t - s.token_begin) of sequence
// s.seq_id. Hkv must equal the cache's num_kv_heads, D its head_dim, and Hq a
// multiple G of Hkv.
//
// For each span: k_new/v_new rows are appended to the sequence's blocks at
// their positions (the sequence must be reserved for past_len + num_tokens and
// have exactly past_len positions cached in `layer`), then, with K/V the
// sequence's cached keys/values of that layer,
//   out[t, h, :] = softmax_j(scale * q[t, h, :] . K[j, h / G, :])  V[j, h / G, :]
//                  over j = 0 .. pos(t)                        (causal)
// Query head h reads kv head h / G (GQA, Llama's repeat_kv). scale defaults
// to 1 / sqrt(D). The softmax subtracts the row max; everything accumulates
// in float32. NumPy, for one sequence with all its positions at once:
//   k = np.repeat(K, G, axis=1); v = np.repeat(V, G, axis=1)
//   s = np.einsum('thd,jhd->htj', q, k) * scale;  s[:, t, j > pos(t)] = -inf
//   out = np.einsum('htj,jhd->thd', softmax(s, -1), v)
//
// Kernels. Work items are (span, kv head) pairs, independent of each other.
//   - Spans of fewer than kCachedAttentionBlasMinTokens tokens (decode): a
//     loop over the sequence's blocks in place, no copy of the cache; each
//     cached key and value row is read once for the G query heads of its kv
//     head (attention_rows.h: AVX-512 / AVX2 row kernels). Bytes read per
//     token at position p, per layer:
//       2 (k, v) * (p + 1) * Hkv * D * 4
//     (e.g. GPT-2 small, 6 kv heads, D 64, p = 127: 393 KB a layer, 4.7 MB a
//     token for 12 layers), plus 2 * Hkv * D * 4 written.
//   - Longer spans (prefill, chunked prefill): K and V of the kv head are
//     gathered once into contiguous [past_len + num_tokens, D] scratch, then
//     per query head and tile of up to 64 query rows, S = scale * Q K^T and
//     out = softmax(S) V are two cblas_sgemm calls over only the keys the
//     tile's last row can see.
//
// Errors (nothing is appended and out is not written on any):
//   kInvalidArgument: a non-float32 or mis-shaped q/k_new/v_new/out (naming
//     the shapes), Hq not a multiple of Hkv, spans that do not tile [0, N)
//     (naming the span and the row expected), a non-finite or non-positive
//     scale; and the KvCache::AcquireStep errors (kOutOfRange layer,
//     kNotFound sequence, kFailedPrecondition past_len / reservation / held).
//
// Thread-safety: calls over different sequences may run concurrently (the
// cache serialises each sequence's calls; see kv_cache.h). Runs on the
// calling thread, or on options.parallel_for's threads; cblas_sgemm uses
// OpenBLAS's threads.
#ifndef MESHSERVE_COMMON_KVCACHE_CACHED_ATTENTION_H_
#define MESHSERVE_COMMON_KVCACHE_CACHED_ATTENTION_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kvcache/kv_cache.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// Spans with at least this many tokens take the sgemm path.
inline constexpr int64_t kCachedAttentionBlasMinTokens = 4;

struct CachedAttentionOptions {
  // 0: 1 / sqrt(head_dim). Otherwise finite and > 0.
  float scale = 0.0f;
  // Optional: runs fn(i) for every i in [0, num_items), possibly in parallel,
  // and returns when all are done. Empty: a plain loop on the calling thread.
  std::function<void(int64_t num_items, const std::function<void(int64_t)>& fn)> parallel_for;
};

// See file comment. Returns out [N, Hq, D] float32.
absl::StatusOr<Tensor> CachedAttention(KvCache& cache, int64_t layer, const Tensor& q,
                                       const Tensor& k_new, const Tensor& v_new,
                                       absl::Span<const KvSpan> spans,
                                       const CachedAttentionOptions& options = {});

// Same, writing into *out, which must already be float32 [N, Hq, D] and not
// be one of the inputs (kInvalidArgument otherwise).
absl::Status CachedAttentionInto(KvCache& cache, int64_t layer, const Tensor& q,
                                 const Tensor& k_new, const Tensor& v_new,
                                 absl::Span<const KvSpan> spans,
                                 const CachedAttentionOptions& options, Tensor* out);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_KVCACHE_CACHED_ATTENTION_H_
