// The generation ops' kernels (decode_kernels.h).
#include "common/program/decode_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/kvcache/attention_rows.h"
#include "common/kvcache/cached_attention.h"
#include "common/sampling/sampler.h"
#include "common/sharding/rules/decode_ops.h"

namespace meshserve {
namespace {

// x's float32 elements: x's own, or a converted copy kept in `keep`.
absl::StatusOr<const float*> Float32Data(const Tensor& x, Tensor& keep) {
  if (x.dtype() == DType::kFloat32) return x.data<float>();
  MS_ASSIGN_OR_RETURN(keep, ConvertDType(x, DType::kFloat32));
  return keep.data<float>();
}

absl::Status CheckAttentionShapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.rank() != 4 || k.rank() != 4 || k.shape() != v.shape() || q.dim(0) != k.dim(0) ||
      q.dim(3) != k.dim(3) || k.dim(2) < 1 || q.dim(2) % k.dim(2) != 0) {
    return InvalidArgument("attention: q ", q.ToString(), ", k ", k.ToString(), ", v ",
                           v.ToString(), " are not [B, T, N, H], [B, S, K, H] with N = G * K");
  }
  return absl::OkStatus();
}

// The first n token rows of x [1, T, heads, d] as float32 [n, heads, d]: one
// copy of their bytes (the cache kernel takes its own packed tensors).
absl::StatusOr<Tensor> TokenRows(const Tensor& x, int64_t n) {
  const std::vector<int64_t> shape = {n, x.dim(2), x.dim(3)};
  if (x.dtype() == DType::kFloat32) {
    return Tensor::FromBytes(DType::kFloat32, shape,
                             x.bytes().substr(0, n * x.dim(2) * x.dim(3) * sizeof(float)));
  }
  MS_ASSIGN_OR_RETURN(Tensor f, ConvertDType(x, DType::kFloat32));
  return TokenRows(f, n);
}

}  // namespace

std::vector<int64_t> SlotPositions(const DecodeLayout& layout) {
  std::vector<int64_t> positions(layout.token_slots(), 0);
  for (int64_t t = 0; t < layout.num_tokens(); ++t) positions[t] = layout.PositionOfSlot(t);
  return positions;
}

absl::StatusOr<Tensor> CausalAttention(const Tensor& q_in, const Tensor& k_in,
                                       const Tensor& v_in, float scale) {
  MS_RETURN_IF_ERROR(CheckAttentionShapes(q_in, k_in, v_in));
  const int64_t B = q_in.dim(0), T = q_in.dim(1), N = q_in.dim(2), H = q_in.dim(3);
  const int64_t S = k_in.dim(1), K = k_in.dim(2), G = N / K;
  if (T > S) return InvalidArgument("attention: ", T, " queries over ", S, " keys");
  Tensor kq, kk, kv;
  MS_ASSIGN_OR_RETURN(const float* pq, Float32Data(q_in, kq));
  MS_ASSIGN_OR_RETURN(const float* pk, Float32Data(k_in, kk));
  MS_ASSIGN_OR_RETURN(const float* pv, Float32Data(v_in, kv));
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(DType::kFloat32, q_in.shape()));
  std::vector<float> scores(static_cast<size_t>(T * S));
  float* po = out.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      const float* qn = pq + (b * T * N + n) * H;
      const float* kn = pk + (b * S * K + n / G) * H;
      const float* vn = pv + (b * S * K + n / G) * H;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, S, H, scale, qn, N * H, kn, K * H,
                  0.0f, scores.data(), S);
      for (int64_t t = 0; t < T; ++t) SoftmaxRowPrefix(&scores[t * S], t + S - T + 1, S);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, H, S, 1.0f, scores.data(), S, vn,
                  K * H, 0.0f, po + (b * T * N + n) * H, N * H);
    }
  }
  return out;
}

absl::StatusOr<Tensor> CachedStepAttention(KvCache& cache, int64_t layer, const Tensor& q_in,
                                           const Tensor& k_in, const Tensor& v_in,
                                           const DecodeLayout& layout, float scale) {
  MS_RETURN_IF_ERROR(CheckAttentionShapes(q_in, k_in, v_in));
  const int64_t T = q_in.dim(1), N = q_in.dim(2), H = q_in.dim(3);
  if (q_in.dim(0) != 1 || T != layout.token_slots() || k_in.dim(1) != T) {
    return InvalidArgument("attention: a generation step of ", layout.token_slots(),
                           " token slots needs q [1, T, N, H] with T = the slots, got ",
                           q_in.ToString(), " and k ", k_in.ToString());
  }
  const int64_t n = layout.num_tokens();
  const DecodeStepIr& step = layout.step();
  std::vector<KvSpan> spans;
  for (size_t i = 0; i < step.spans.size(); ++i) {
    const DecodeSpanIr& s = step.spans[i];
    MS_RETURN_IF_ERROR(cache.Reserve(s.seq, s.past_len + s.num_tokens));
    spans.push_back(KvSpan{s.seq, s.past_len, layout.SpanBegin(static_cast<int64_t>(i)),
                           s.num_tokens});
  }
  if (n == 0) return Tensor::Create(DType::kFloat32, q_in.shape());
  MS_ASSIGN_OR_RETURN(Tensor q, TokenRows(q_in, n));
  MS_ASSIGN_OR_RETURN(Tensor k, TokenRows(k_in, n));
  MS_ASSIGN_OR_RETURN(Tensor v, TokenRows(v_in, n));
  CachedAttentionOptions options;
  options.scale = scale;
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kFloat32, {T, N, H}));
  if (n == T) {  // no padding: the kernel writes the result in place
    MS_RETURN_IF_ERROR(CachedAttentionInto(cache, layer, q, k, v, spans, options, &out));
  } else {  // padding slots stay zero
    MS_ASSIGN_OR_RETURN(Tensor real, CachedAttention(cache, layer, q, k, v, spans, options));
    std::memcpy(out.raw_data(), real.raw_data(), real.NumBytes());
  }
  MS_RETURN_IF_ERROR(out.SetShape(q_in.shape()));
  return out;
}

absl::StatusOr<Tensor> SelectRows(const Tensor& x_in, int64_t rows, const DecodeLayout* layout) {
  if (x_in.rank() != 3 || rows < 1 || rows > x_in.dim(1) ||
      (layout != nullptr && static_cast<int64_t>(layout->row_slots().size()) != rows)) {
    return InvalidArgument("select_rows: ", rows, " rows of ", x_in.ToString());
  }
  Tensor converted;
  MS_ASSIGN_OR_RETURN(const float* px, Float32Data(x_in, converted));
  const int64_t B = x_in.dim(0), T = x_in.dim(1), D = x_in.dim(2);
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kFloat32, {B, rows, D}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = layout != nullptr ? layout->row_slots()[r] : T - rows + r;
      std::memcpy(out.data<float>() + (b * rows + r) * D, px + (b * T + t) * D,
                  D * sizeof(float));
    }
  }
  if (x_in.dtype() == DType::kFloat32) return out;
  return ConvertDType(out, x_in.dtype());
}

absl::StatusOr<Tensor> SampleRows(const Tensor& logits_in, int64_t vocab_size,
                                  const DecodeLayout* layout) {
  if (logits_in.rank() != 3 || vocab_size < 1 || vocab_size > logits_in.dim(2) ||
      (layout != nullptr &&
       static_cast<int64_t>(layout->row_slots().size()) != logits_in.dim(1))) {
    return InvalidArgument("sample: logits ", logits_in.ToString(), " with vocab_size ",
                           vocab_size);
  }
  Tensor converted;
  MS_ASSIGN_OR_RETURN(const float* pl, Float32Data(logits_in, converted));
  const int64_t B = logits_in.dim(0), R = logits_in.dim(1), V = logits_in.dim(2);
  const int64_t W = kSampleRecordWidth;
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kFloat32, {B, R, W}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < R; ++r) {
      float* rec = out.data<float>() + (b * R + r) * W;
      SamplingParams params;
      params.temperature = 0;
      int64_t position = r;
      if (layout != nullptr) {
        const int64_t span = layout->row_spans()[r];
        if (span < 0) {  // padding
          rec[0] = -1;
          continue;
        }
        const DecodeSpanIr& s = layout->step().spans[span];
        params = s.sampling;
        position = s.past_len + s.num_tokens;
      }
      absl::Span<const float> row(pl + (b * R + r) * V, V);
      MS_ASSIGN_OR_RETURN(SampleResult result, SampleRow(row, vocab_size, params, position),
                          "sample: row ", r);
      rec[0] = static_cast<float>(result.token_id);
      rec[1] = result.logprob.value_or(0.0f);
      for (int64_t i = 0; 3 + 2 * i < W; ++i) {
        const bool listed = i < static_cast<int64_t>(result.top_logprobs.size());
        rec[2 + 2 * i] = listed ? static_cast<float>(result.top_logprobs[i].id) : -1.0f;
        rec[3 + 2 * i] = listed ? result.top_logprobs[i].logprob : 0.0f;
      }
    }
  }
  return out;
}

}  // namespace meshserve
