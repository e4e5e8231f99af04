// The sharded sampler's first half: what one shard of a logits row (a
// contiguous id range [begin, end) of the padded vocabulary, e.g. the slice of
// the LM head a worker holds) sends so that MergeShardSummaries (sampler.h)
// computes exactly the whole-row SampleResult.
//
// A summary holds, over the shard's valid ids (id < vocab_size and logit not
// masked, see below):
//   candidates      the shard's most likely ids, logit desc, lower id first on
//                   ties: at least max(1, num_logprobs, top_k) of them, and for
//                   top_p (without top_k) `num_candidates` (default
//                   kDefaultTopPCandidates). Any id the shard did not send ranks
//                   below its last candidate, which is how the merge knows how
//                   far the merged list is the true global order.
//   logit_exp_sum   ExpSum of the raw logits (num_logprobs >= 0): the global
//                   logsumexp for log_softmax.
//   scaled_exp_sum  ExpSum of logit / T (top_p on, top_k off): the nucleus's
//                   normaliser.
//   gumbel_*        with T > 0 and neither top_k nor top_p: the shard's
//                   Gumbel-max winner argmax_i (logit_i / T + G(seed, position, i));
//                   the global winner is the max over shards, lower id on ties.
//
// Logit rules (the whole row's too): an id >= vocab_size (padding) is never
// read; NaN and +inf are InvalidArgument, as is a logit above kMaxAbsLogit;
// a logit below -kMaxAbsLogit (-inf, or a mask such as float's lowest) is
// masked: never sampled, never listed, probability 0.
//
// Cost per 50257-wide row, one core (sampling_bench): see sampler.h.
//
// Thread-safety: pure functions over caller-owned spans; a ShardSummary is a
// plain value.
#ifndef MESHSERVE_COMMON_SAMPLING_SHARD_SUMMARY_H_
#define MESHSERVE_COMMON_SAMPLING_SHARD_SUMMARY_H_

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sampling/exp_sum.h"
#include "common/sampling/sampling_params.h"

namespace meshserve {

inline constexpr float kMaxAbsLogit = 1e9f;
inline constexpr int64_t kDefaultTopPCandidates = 256;

// What the params mean for one vocabulary, resolved once (greedy below
// kGreedyTemperature; top_k >= vocab_size and top_p == 1 are off).
struct SamplingPlan {
  bool greedy = false;
  double inv_temperature = 1;  // x_i = logit_i * inv_temperature
  int64_t top_k = 0;           // 0: off
  bool top_p_on = false;
  int64_t num_logprobs = -1;
  // T > 0 and neither top_k nor top_p: Gumbel-max over the whole vocabulary.
  bool full_vocabulary() const { return !greedy && top_k == 0 && !top_p_on; }
};
// `params` must have passed ValidateSamplingParams.
SamplingPlan PlanSampling(const SamplingParams& params, int64_t vocab_size);

struct SampleCandidate {
  int64_t id = 0;
  float logit = 0;
  bool operator==(const SampleCandidate& o) const { return id == o.id && logit == o.logit; }
};
// The candidates' order: a ranks before b.
inline bool RanksBefore(const SampleCandidate& a, const SampleCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

struct ShardSummary {
  int64_t begin = 0;      // the shard's ids: [begin, end) of the padded row
  int64_t end = 0;
  int64_t num_valid = 0;  // ids in [begin, min(end, vocab_size)) not masked
  std::vector<SampleCandidate> candidates;  // RanksBefore order
  ExpSum logit_exp_sum;
  ExpSum scaled_exp_sum;
  int64_t gumbel_id = -1;  // -1: none (not full_vocabulary, or no valid id)
  double gumbel_score = -std::numeric_limits<double>::infinity();
  float gumbel_logit = 0;

  // The shard holds valid ids it did not send.
  bool truncated() const { return num_valid > static_cast<int64_t>(candidates.size()); }
  bool operator==(const ShardSummary& o) const;
  std::string ToString() const;
};
std::ostream& operator<<(std::ostream& os, const ShardSummary& summary);

// Summarises logits[0, size) holding ids [begin, begin + size) of a row whose
// real vocabulary is [0, vocab_size), for the token at `position` (>= 0).
// num_candidates: the top_p candidate count (0: kDefaultTopPCandidates); a
// merge that reports more are needed gives the count to ask for.
// Errors: InvalidArgument for bad params, vocab_size < 1, begin < 0,
// position < 0, num_candidates < 0, or a bad logit (naming its id and value).
absl::StatusOr<ShardSummary> SummarizeShard(absl::Span<const float> logits, int64_t begin,
                                            int64_t vocab_size, const SamplingParams& params,
                                            int64_t position, int64_t num_candidates = 0);

// One row of a batch: its own params (and seed) and its token's position.
struct RowSampling {
  SamplingParams params;
  int64_t position = 0;
};

// SummarizeShard for every row of a batch: logits holds rows.size() rows of
// `row_stride` entries, each the shard's ids [begin, begin + row_stride).
// A bad row fails the call, its index named.
absl::StatusOr<std::vector<ShardSummary>> SummarizeShardBatch(
    absl::Span<const float> logits, int64_t row_stride, int64_t begin, int64_t vocab_size,
    absl::Span<const RowSampling> rows);

// Re-selects `summary`'s candidates (the rest is unchanged) with at least
// num_candidates of them: the retry a merge asks for, without rescanning the
// sums. `logits`, begin and vocab_size as given to SummarizeShard.
void RefillCandidates(absl::Span<const float> logits, int64_t vocab_size,
                      int64_t num_candidates, ShardSummary* summary);

// Re-selects `summary`'s candidates after a top_p merge came back incomplete,
// given the row's top_p normaliser log_z (MergeOutcome::retry_log_normalizer):
// every valid id of the shard that can be in the nucleus, found without a
// sort. A histogram of x = logit / T (bins of 1/32 over the 64 below the
// shard's max) gives a lower bound of each bin's probability; summed from the
// top, they pass top_p at some bin, and no id below that bin can be in the
// nucleus (the shard's own ids above it already hold top_p of the row). The
// ids above, sorted, become the candidates (if more than the shard sent), so
// the next merge is complete but for rounding at the very edge (then it asks
// again). logits, vocab_size and params as given to SummarizeShard.
// Use it when the shard holds most of the row's probability (SampleRow's one
// shard): a shard holding less than top_p of it cannot rule out any of its
// ids and sends them all; several shards do better with RefillCandidates and
// MergeOutcome::retry_num_candidates.
void RefillNucleusCandidates(absl::Span<const float> logits, int64_t vocab_size,
                             const SamplingParams& params, double log_z, ShardSummary* summary);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_SHARD_SUMMARY_H_
