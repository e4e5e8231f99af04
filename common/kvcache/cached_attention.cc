// CachedAttention (see cached_attention.h): validation, the append of the new
// rows into the blocks, and the two kernels (block loop for decode, gathered
// sgemm for prefill).
#include "common/kvcache/cached_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/kvcache/attention_rows.h"

namespace meshserve {
namespace {

// Query rows per sgemm tile of the prefill path (bounds the score scratch to
// kQueryTile x (past_len + num_tokens) floats).
constexpr int64_t kQueryTile = 64;

struct Dims {
  int64_t n = 0;    // tokens in the batch
  int64_t hq = 0;   // query heads
  int64_t hkv = 0;  // kv heads
  int64_t d = 0;    // head dim
  int64_t g = 0;    // query heads per kv head
};

// What one (span, kv head) work item reads and writes.
struct Item {
  const KvBlockPool* pool;
  int64_t layer;
  const KvCache::StepLease::Entry* entry;
  int64_t kv_head;
  Dims dims;
  float scale;
  const float* q;
  const float* k_new;
  const float* v_new;
  float* out;
};

absl::Status CheckRank3Float(absl::string_view name, const Tensor& t) {
  if (t.dtype() != DType::kFloat32 || t.rank() != 3) {
    return InvalidArgument("CachedAttention: ", name, " ", t.ToString(),
                           " must be float32 of rank 3");
  }
  return absl::OkStatus();
}

absl::StatusOr<Dims> CheckShapes(const KvBlockPoolOptions& cache, const Tensor& q,
                                 const Tensor& k_new, const Tensor& v_new) {
  MS_RETURN_IF_ERROR(CheckRank3Float("q", q));
  MS_RETURN_IF_ERROR(CheckRank3Float("k_new", k_new));
  MS_RETURN_IF_ERROR(CheckRank3Float("v_new", v_new));
  Dims dims{q.dim(0), q.dim(1), cache.num_kv_heads, cache.head_dim, 0};
  const std::vector<int64_t> kv_shape = {dims.n, dims.hkv, dims.d};
  if (k_new.shape() != kv_shape || v_new.shape() != kv_shape || q.dim(2) != dims.d) {
    return InvalidArgument("CachedAttention: q ", q.ToString(), ", k_new ", k_new.ToString(),
                           " and v_new ", v_new.ToString(), " must be [N, Hq, ", dims.d,
                           "] and [N, ", dims.hkv, ", ", dims.d,
                           "] (the cache's kv heads and head_dim)");
  }
  if (dims.hq < dims.hkv || dims.hq % dims.hkv != 0) {
    return InvalidArgument("CachedAttention: ", dims.hq, " query heads are not a multiple of ",
                           dims.hkv, " kv heads");
  }
  dims.g = dims.hq / dims.hkv;
  return dims;
}

absl::Status CheckSpansTile(absl::Span<const KvSpan> spans, int64_t n) {
  int64_t next = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].token_begin != next) {
      return InvalidArgument("CachedAttention: span ", i, " (sequence ", spans[i].seq_id,
                             ") begins at token ", spans[i].token_begin, ", expected ", next,
                             " (spans must tile the ", n, " tokens in order)");
    }
    if (spans[i].num_tokens < 1 || spans[i].num_tokens > n - next) {
      return InvalidArgument("CachedAttention: span ", i, " (sequence ", spans[i].seq_id,
                             ") has num_tokens ", spans[i].num_tokens, ": must be in [1, ",
                             n - next, "] (", n, " tokens, ", next, " covered before it)");
    }
    next += spans[i].num_tokens;
  }
  if (next != n) {
    return InvalidArgument("CachedAttention: spans cover ", next, " tokens but q has ", n);
  }
  return absl::OkStatus();
}

// Writes the item's k_new / v_new rows into its blocks.
void AppendRows(const Item& it) {
  const KvSpan& span = it.entry->span;
  const int64_t bt = it.pool->block_tokens(), d = it.dims.d;
  for (int64_t i = 0; i < span.num_tokens; ++i) {
    const int64_t pos = span.past_len + i;
    const int32_t block = it.entry->blocks[static_cast<size_t>(pos / bt)];
    const int64_t at = (it.kv_head * bt + pos % bt) * d;
    const int64_t from = ((span.token_begin + i) * it.dims.hkv + it.kv_head) * d;
    std::memcpy(it.pool->KeyData(block, it.layer) + at, it.k_new + from, d * sizeof(float));
    std::memcpy(it.pool->ValueData(block, it.layer) + at, it.v_new + from, d * sizeof(float));
  }
}

// One token (row t, position pos) against the blocks in place, for the G
// query heads of the item's kv head. scores: G * (pos + 1) floats of scratch.
void AttendOneToken(const Item& it, int64_t t, int64_t pos, std::vector<float>* scratch) {
  const int64_t bt = it.pool->block_tokens(), d = it.dims.d, g_count = it.dims.g;
  const int64_t len = pos + 1, num_blocks = (len + bt - 1) / bt;
  scratch->resize(static_cast<size_t>(g_count * len));
  float* scores = scratch->data();
  const float* q0 = it.q + (t * it.dims.hq + it.kv_head * g_count) * d;
  float* o0 = it.out + (t * it.dims.hq + it.kv_head * g_count) * d;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* keys = it.pool->KeyData(it.entry->blocks[b], it.layer) + it.kv_head * bt * d;
    const int64_t rows = std::min(bt, len - b * bt);
    for (int64_t g = 0; g < g_count; ++g) {  // the block stays in L1 for the G heads
      kv_internal::ScoreRows(q0 + g * d, keys, rows, d, it.scale, scores + g * len + b * bt);
    }
  }
  for (int64_t g = 0; g < g_count; ++g) SoftmaxRowPrefix(scores + g * len, len, len);
  std::fill(o0, o0 + g_count * d, 0.0f);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* values =
        it.pool->ValueData(it.entry->blocks[b], it.layer) + it.kv_head * bt * d;
    const int64_t rows = std::min(bt, len - b * bt);
    for (int64_t g = 0; g < g_count; ++g) {
      kv_internal::AccumulateRows(scores + g * len + b * bt, values, rows, d, o0 + g * d);
    }
  }
}

// Copies positions [0, len) of the item's kv head into contiguous [len, d]
// keys and values.
void GatherKv(const Item& it, int64_t len, float* keys, float* values) {
  const int64_t bt = it.pool->block_tokens(), d = it.dims.d;
  for (int64_t b = 0; b * bt < len; ++b) {
    const int64_t rows = std::min(bt, len - b * bt);
    const int32_t block = it.entry->blocks[b];
    const int64_t at = it.kv_head * bt * d;
    std::memcpy(keys + b * bt * d, it.pool->KeyData(block, it.layer) + at,
                rows * d * sizeof(float));
    std::memcpy(values + b * bt * d, it.pool->ValueData(block, it.layer) + at,
                rows * d * sizeof(float));
  }
}

// The span's tokens through two sgemm per query head and query tile.
void AttendPrefill(const Item& it, std::vector<float>* scratch) {
  const KvSpan& span = it.entry->span;
  const int64_t d = it.dims.d, hq = it.dims.hq, len = span.past_len + span.num_tokens;
  const int64_t tile = std::min(kQueryTile, span.num_tokens);
  scratch->resize(static_cast<size_t>(2 * len * d + tile * len));
  float* keys = scratch->data();
  float* values = keys + len * d;
  float* scores = values + len * d;
  GatherKv(it, len, keys, values);
  for (int64_t i0 = 0; i0 < span.num_tokens; i0 += kQueryTile) {
    const int64_t m = std::min(kQueryTile, span.num_tokens - i0);
    const int64_t cols = span.past_len + i0 + m;  // keys the tile's last row sees
    const int64_t row0 = span.token_begin + i0;
    for (int64_t g = 0; g < it.dims.g; ++g) {
      const int64_t head = it.kv_head * it.dims.g + g;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, cols, d, it.scale,
                  it.q + (row0 * hq + head) * d, hq * d, keys, d, 0.0f, scores, cols);
      for (int64_t r = 0; r < m; ++r) {
        SoftmaxRowPrefix(scores + r * cols, span.past_len + i0 + r + 1, cols);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, cols, 1.0f, scores, cols,
                  values, d, 0.0f, it.out + (row0 * hq + head) * d, hq * d);
    }
  }
}

void RunItem(const Item& it) {
  thread_local std::vector<float> scratch;
  AppendRows(it);
  const KvSpan& span = it.entry->span;
  if (span.num_tokens >= kCachedAttentionBlasMinTokens) {
    AttendPrefill(it, &scratch);
    return;
  }
  for (int64_t i = 0; i < span.num_tokens; ++i) {
    AttendOneToken(it, span.token_begin + i, span.past_len + i, &scratch);
  }
}

}  // namespace

absl::Status CachedAttentionInto(KvCache& cache, int64_t layer, const Tensor& q,
                                 const Tensor& k_new, const Tensor& v_new,
                                 absl::Span<const KvSpan> spans,
                                 const CachedAttentionOptions& options, Tensor* out) {
  const KvBlockPool& pool = cache.pool();
  MS_ASSIGN_OR_RETURN(const Dims dims, CheckShapes(pool.options(), q, k_new, v_new));
  if (out == nullptr || out->dtype() != DType::kFloat32 || out->shape() != q.shape()) {
    return InvalidArgument("CachedAttention: out ", out == nullptr ? "null" : out->ToString(),
                           " must be float32 of q's shape ", ShapeToString(q.shape()));
  }
  for (const Tensor* in : {&q, &k_new, &v_new}) {
    if (in->NumBytes() > 0 && in->raw_data() == out->raw_data()) {
      return InvalidArgument("CachedAttention: out must not share its buffer with an input");
    }
  }
  if (!(options.scale >= 0.0f) || !std::isfinite(options.scale)) {
    return InvalidArgument("CachedAttention: scale ", options.scale, " must be finite and > 0");
  }
  const float scale = options.scale > 0.0f ? options.scale
                                           : 1.0f / std::sqrt(static_cast<float>(dims.d));
  MS_RETURN_IF_ERROR(CheckSpansTile(spans, dims.n));
  MS_ASSIGN_OR_RETURN(KvCache::StepLease lease, cache.AcquireStep(layer, spans),
                      "CachedAttention");
  const auto& entries = lease.entries();
  const int64_t num_items = static_cast<int64_t>(entries.size()) * dims.hkv;
  auto run = [&](int64_t i) {
    const Item item{&pool,           layer,          &entries[i / dims.hkv], i % dims.hkv,
                    dims,            scale,          q.data<float>(),        k_new.data<float>(),
                    v_new.data<float>(), out->data<float>()};
    RunItem(item);
  };
  if (options.parallel_for) {
    options.parallel_for(num_items, run);
  } else {
    for (int64_t i = 0; i < num_items; ++i) run(i);
  }
  lease.Commit();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CachedAttention(KvCache& cache, int64_t layer, const Tensor& q,
                                       const Tensor& k_new, const Tensor& v_new,
                                       absl::Span<const KvSpan> spans,
                                       const CachedAttentionOptions& options) {
  if (q.dtype() != DType::kFloat32 || q.rank() != 3) {
    return InvalidArgument("CachedAttention: q ", q.ToString(), " must be float32 of rank 3");
  }
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(DType::kFloat32, q.shape()));
  MS_RETURN_IF_ERROR(CachedAttentionInto(cache, layer, q, k_new, v_new, spans, options, &out));
  return out;
}

}  // namespace meshserve
