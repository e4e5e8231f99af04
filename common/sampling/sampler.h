// meshserve's token sampler: the next token of a sequence from a row of logits,
// whole (SampleRow, SampleBatch) or from per-shard summaries of a vocabulary
// split across workers (SummarizeShard in shard_summary.h, then
// MergeShardSummaries), with the same result bit for bit.
//
// Math (notation: l = the raw logits over the real vocabulary [0, vocab_size);
// T = temperature; x = l / T, computed as l * (1 / T) in double):
//   greedy (T < kGreedyTemperature = 1e-5, as vLLM): argmax l, lowest id on ties.
//   Otherwise, as vLLM applies them: temperature, then top_k, then top_p.
//     top_k   keeps the k largest l (ties: lower id first).
//     top_p   over the tokens kept so far sorted by probability (desc, lower id
//             first), p_j = exp(x_j - logsumexp(x over the kept tokens)), keeps
//             the smallest prefix whose cumulative sum (in order, double) is
//             >= top_p; at least one token, all kept tokens if rounding keeps
//             the sum below top_p.
//     token   = argmax over kept ids of x_i + G_i (Gumbel-max: exactly a draw
//             from softmax(x) restricted to the kept ids), G_i = -log(-log u_i)
//             with u_i from Philox4x32-10 keyed by the seed at counter
//             (position, i) (philox.h): no state, so the same seed, position and
//             logits give the same token on any worker, batch or mesh; ties go
//             to the lower id. numpy: np.argmax(np.where(kept, x + g, -np.inf)).
//   Logprobs (OpenAI completions, vLLM's default): log_softmax of the RAW l over
//   the valid ids (before temperature, top_k, top_p): the sampled token's
//   value, and for num_logprobs = N >= 1 the N most likely (id, logprob), logit
//   desc, lower id first on ties.
//   Padding: ids >= vocab_size are never read. Masked ids (logit < -1e9,
//   -inf included) have probability 0: never sampled nor listed.
//
// Sharding. Gumbel-max makes sampling separable over the vocabulary: without
// top_k / top_p each shard sends its local winner and the merge takes the max.
// With them, each shard sends its most likely candidates and exact sums
// (ExpSum, exp_sum.h: integer arithmetic, so any split sums to the same bits);
// the merge rebuilds the global order as far as every shard's candidates
// reach. If the top_p nucleus runs past that, MergeShardSummaries returns
// complete = false and retry_num_candidates: the caller asks the shards again
// (RefillNucleusCandidates with the returned normaliser, or SummarizeShard /
// RefillCandidates with more candidates) and merges again; it never samples
// from an incomplete list.
//
// Cost per 50257-wide row on one core of this machine (sampling_bench, -O2,
// Gaussian logits sd 3; see README.md for the table): greedy 0.13 ms; T = 1
// with no top_k/top_p 0.65 ms (one Philox call per two ids; the logs only for
// ids the bound cannot rule out); top_k = 50 0.15 ms; top_p = 0.9 1.2-1.6 ms
// (one exp per id for the normaliser, a bounded heap of 256 candidates, then
// if the nucleus is wider a histogram bound, no sort of the row);
// num_logprobs >= 0 adds ~0.7 ms (one exp per id).
//
// Thread-safety: pure functions over caller-owned spans.
#ifndef MESHSERVE_COMMON_SAMPLING_SAMPLER_H_
#define MESHSERVE_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sampling/sampling_params.h"
#include "common/sampling/shard_summary.h"

namespace meshserve {

struct TokenLogprob {
  int64_t id = 0;
  float logprob = 0;
  bool operator==(const TokenLogprob& o) const { return id == o.id && logprob == o.logprob; }
};

struct SampleResult {
  int64_t token_id = -1;
  std::optional<float> logprob;            // num_logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;  // num_logprobs = N >= 1: min(N, valid ids)

  bool operator==(const SampleResult& o) const {
    return token_id == o.token_id && logprob == o.logprob && top_logprobs == o.top_logprobs;
  }
  bool operator!=(const SampleResult& o) const { return !(*this == o); }
  std::string ToString() const;
};
std::ostream& operator<<(std::ostream& os, const SampleResult& result);

struct MergeOutcome {
  bool complete = false;
  // When !complete: the num_candidates to summarise the shards with again
  // (SummarizeShard or RefillCandidates), and when the top_p nucleus ran past
  // the candidates, the row's top_p normaliser for RefillNucleusCandidates
  // (NaN otherwise), which usually completes in one retry.
  int64_t retry_num_candidates = 0;
  double retry_log_normalizer = std::numeric_limits<double>::quiet_NaN();
  SampleResult result;  // when complete
};

// Merges the summaries of shards that tile the row (their [begin, end) ranges,
// in any order, cover [0, vocab_size) without gap or overlap), all made with
// the same params and position. Errors: InvalidArgument for bad params, a gap
// or overlap, a summary made with other params, or no valid id in the row.
absl::StatusOr<MergeOutcome> MergeShardSummaries(absl::Span<const ShardSummary> shards,
                                                 int64_t vocab_size, const SamplingParams& params,
                                                 int64_t position);

// The whole-row sampler: logits holds the row (>= vocab_size entries; the
// rest is padding). Same errors as SummarizeShard, and InvalidArgument when
// the row is shorter than vocab_size.
absl::StatusOr<SampleResult> SampleRow(absl::Span<const float> logits, int64_t vocab_size,
                                       const SamplingParams& params, int64_t position);

// Samples rows.size() rows of `row_stride` logits each (logits.size() ==
// rows.size() * row_stride, row_stride >= vocab_size). A bad row fails the
// call, its index named.
absl::StatusOr<std::vector<SampleResult>> SampleBatch(absl::Span<const float> logits,
                                                      int64_t row_stride, int64_t vocab_size,
                                                      absl::Span<const RowSampling> rows);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_SAMPLER_H_
