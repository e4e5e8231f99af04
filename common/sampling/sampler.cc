// The sampler's merge and whole-row entry points (see sampler.h for the math).
#include "common/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sampling/philox.h"
#include "common/sampling/row_batch.h"

namespace meshserve {
namespace {

// The shards' candidates in global order, and how far that order is certain.
struct MergedCandidates {
  std::vector<SampleCandidate> list;  // RanksBefore order
  // list[0, known) are exactly the `known` globally most likely valid ids: an
  // id a shard did not send ranks below that shard's last candidate.
  int64_t known = 0;
  int64_t total_valid = 0;
  int64_t largest_truncated_count = 0;  // candidates sent by a truncated shard
};

// A summary from a peer: its candidates and winner lie in its real ids, the
// candidates in RanksBefore order and no more than its valid ids.
absl::Status CheckSummary(const ShardSummary& s, int64_t vocab_size) {
  const int64_t real_end = std::min(s.end, vocab_size);
  const auto outside = [&](int64_t id) { return id < s.begin || id >= real_end; };
  if (static_cast<int64_t>(s.candidates.size()) > s.num_valid) {
    return InvalidArgument("shard [", s.begin, ", ", s.end, ") sent ", s.candidates.size(),
                           " candidates but has ", s.num_valid, " valid ids");
  }
  for (size_t j = 0; j < s.candidates.size(); ++j) {
    const bool in_order = j == 0 || RanksBefore(s.candidates[j - 1], s.candidates[j]);
    if (outside(s.candidates[j].id) || !in_order) {
      return InvalidArgument("shard [", s.begin, ", ", s.end, ") candidate ", j, " (id ",
                             s.candidates[j].id, ") is outside its ids or out of order");
    }
  }
  if (s.gumbel_id >= 0 && outside(s.gumbel_id)) {
    return InvalidArgument("shard [", s.begin, ", ", s.end, ") winner id ", s.gumbel_id,
                           " is outside its ids");
  }
  return absl::OkStatus();
}

absl::Status CheckShards(absl::Span<const ShardSummary> shards, int64_t vocab_size,
                         const SamplingPlan& plan) {
  if (shards.empty()) return InvalidArgument("no shard summaries to merge");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const ShardSummary& s : shards) {
    MS_RETURN_IF_ERROR(CheckSummary(s, vocab_size));
    ranges.emplace_back(s.begin, s.end);
    const bool has_valid = s.num_valid > 0;
    if (has_valid && s.candidates.empty()) {
      return InvalidArgument("shard [", s.begin, ", ", s.end, ") has valid ids but no candidates");
    }
    const bool missing_sum = (plan.num_logprobs >= 0 && s.logit_exp_sum.empty()) ||
                             (plan.top_p_on && plan.top_k == 0 && s.scaled_exp_sum.empty()) ||
                             (plan.full_vocabulary() && s.gumbel_id < 0);
    if (has_valid && missing_sum) {
      return InvalidArgument("shard [", s.begin, ", ", s.end,
                             ") was summarised with other sampling params");
    }
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered || end < begin) {
      return InvalidArgument("shard [", begin, ", ", end, ") does not start at ", covered,
                             ": the shards must tile the row without gap or overlap");
    }
    covered = end;
  }
  if (covered < vocab_size) {
    return InvalidArgument("the shards cover ids [0, ", covered, ") of vocab_size ", vocab_size);
  }
  return absl::OkStatus();
}

MergedCandidates MergeCandidates(absl::Span<const ShardSummary> shards) {
  MergedCandidates merged;
  for (const ShardSummary& s : shards) {
    merged.list.insert(merged.list.end(), s.candidates.begin(), s.candidates.end());
    merged.total_valid += s.num_valid;
  }
  std::sort(merged.list.begin(), merged.list.end(), RanksBefore);
  merged.known = static_cast<int64_t>(merged.list.size());
  for (const ShardSummary& s : shards) {
    if (!s.truncated()) continue;
    const auto last = std::lower_bound(merged.list.begin(), merged.list.end(),
                                       s.candidates.back(), RanksBefore);
    merged.known = std::min<int64_t>(merged.known, last - merged.list.begin() + 1);
    merged.largest_truncated_count = std::max<int64_t>(merged.largest_truncated_count,
                                                       s.candidates.size());
  }
  return merged;
}

MergeOutcome NeedMore(const MergedCandidates& merged, int64_t needed) {
  MergeOutcome outcome;
  outcome.retry_num_candidates =
      std::max<int64_t>(needed, 4 * std::max<int64_t>(1, merged.largest_truncated_count));
  return outcome;
}

// The number of leading merged candidates kept by top_k and top_p, or -1 when
// the nucleus runs past the known prefix (then *known_mass is that prefix's
// probability). *log_normalizer: top_p's log Z.
int64_t KeptCount(absl::Span<const ShardSummary> shards, const MergedCandidates& merged,
                  const SamplingPlan& plan, double top_p, double* log_normalizer,
                  double* known_mass) {
  const int64_t limit =
      plan.top_k > 0 ? std::min(plan.top_k, merged.total_valid) : merged.total_valid;
  if (!plan.top_p_on) return limit;
  ExpSum z;
  if (plan.top_k > 0) {
    for (int64_t j = 0; j < limit; ++j) z.Add(merged.list[j].logit * plan.inv_temperature);
  } else {
    for (const ShardSummary& s : shards) z.Merge(s.scaled_exp_sum);
  }
  const double log_z = z.Log();
  *log_normalizer = log_z;
  double cumulative = 0;
  for (int64_t j = 0; j < limit; ++j) {
    if (j >= merged.known) {
      *known_mass = cumulative;
      return -1;
    }
    cumulative += std::exp(merged.list[j].logit * plan.inv_temperature - log_z);
    if (cumulative >= top_p) return j + 1;
  }
  return limit;
}

// Gumbel-max over list[0, kept): the list is in descending x, so once x plus
// the largest possible Gumbel cannot reach the winner, no later id can.
SampleCandidate GumbelAmong(const std::vector<SampleCandidate>& list, int64_t kept,
                            const SamplingPlan& plan, uint64_t seed, int64_t position) {
  SampleCandidate best = list[0];
  double best_score =
      best.logit * plan.inv_temperature + GumbelFromBits(TokenRandomBits(seed, position, best.id));
  for (int64_t j = 1; j < kept; ++j) {
    const double x = list[j].logit * plan.inv_temperature;
    const double bar = best_score - 1e-9 * (1 + std::abs(best_score));
    if (x + kMaxGumbel < bar) break;
    const uint64_t bits = TokenRandomBits(seed, position, list[j].id);
    if (x + GumbelUpperBound(bits) < bar) continue;
    const double score = x + GumbelFromBits(bits);
    if (score > best_score || (score == best_score && list[j].id < best.id)) {
      best_score = score;
      best = list[j];
    }
  }
  return best;
}

// The full-vocabulary winner: the best of the shards' winners.
SampleCandidate BestShardWinner(absl::Span<const ShardSummary> shards) {
  const ShardSummary* best = nullptr;
  for (const ShardSummary& s : shards) {
    if (s.gumbel_id < 0) continue;
    if (best == nullptr || s.gumbel_score > best->gumbel_score ||
        (s.gumbel_score == best->gumbel_score && s.gumbel_id < best->gumbel_id)) {
      best = &s;
    }
  }
  return {best->gumbel_id, best->gumbel_logit};
}

void FillLogprobs(absl::Span<const ShardSummary> shards, const MergedCandidates& merged,
                  const SamplingPlan& plan, float token_logit, SampleResult* result) {
  if (plan.num_logprobs < 0) return;
  ExpSum sum;
  for (const ShardSummary& s : shards) sum.Merge(s.logit_exp_sum);
  const double lse = sum.Log();
  result->logprob = static_cast<float>(token_logit - lse);
  const int64_t n = std::min(plan.num_logprobs, merged.total_valid);
  for (int64_t j = 0; j < n; ++j) {
    result->top_logprobs.push_back(
        {merged.list[j].id, static_cast<float>(merged.list[j].logit - lse)});
  }
}

}  // namespace

absl::StatusOr<MergeOutcome> MergeShardSummaries(absl::Span<const ShardSummary> shards,
                                                 int64_t vocab_size, const SamplingParams& params,
                                                 int64_t position) {
  MS_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (vocab_size < 1) return InvalidArgument("vocab_size ", vocab_size, " must be >= 1");
  if (position < 0) return InvalidArgument("position ", position, " must be >= 0");
  const SamplingPlan plan = PlanSampling(params, vocab_size);
  MS_RETURN_IF_ERROR(CheckShards(shards, vocab_size, plan));
  const MergedCandidates merged = MergeCandidates(shards);
  if (merged.total_valid == 0) {
    return InvalidArgument("every logit of the vocabulary [0, ", vocab_size,
                           ") is masked (below ", -kMaxAbsLogit, ")");
  }
  int64_t needed = std::max<int64_t>(1, plan.num_logprobs);
  if (!plan.greedy && plan.top_k > 0) needed = std::max(needed, plan.top_k);
  needed = std::min(needed, merged.total_valid);
  if (needed > merged.known) return NeedMore(merged, needed);

  SampleCandidate token = merged.list[0];
  if (plan.full_vocabulary()) {
    token = BestShardWinner(shards);
  } else if (!plan.greedy) {
    double log_z = 0, known_mass = 0;
    const int64_t kept = KeptCount(shards, merged, plan, params.top_p, &log_z, &known_mass);
    if (kept < 0) {
      // The known prefix holds known_mass < top_p: ask for 4 times the
      // linear extrapolation to top_p (the mass per token falls with rank).
      const double ratio = params.top_p / std::max(known_mass, 1e-3);
      MergeOutcome outcome = NeedMore(
          merged, static_cast<int64_t>(std::ceil(4 * ratio * merged.largest_truncated_count)));
      outcome.retry_log_normalizer = log_z;
      return outcome;
    }
    token = GumbelAmong(merged.list, kept, plan, params.seed, position);
  }
  MergeOutcome outcome;
  outcome.complete = true;
  outcome.result.token_id = token.id;
  FillLogprobs(shards, merged, plan, token.logit, &outcome.result);
  return outcome;
}

absl::StatusOr<SampleResult> SampleRow(absl::Span<const float> logits, int64_t vocab_size,
                                       const SamplingParams& params, int64_t position) {
  if (static_cast<int64_t>(logits.size()) < vocab_size) {
    return InvalidArgument("a row of ", logits.size(), " logits is shorter than vocab_size ",
                           vocab_size);
  }
  MS_ASSIGN_OR_RETURN(ShardSummary summary,
                      SummarizeShard(logits, 0, vocab_size, params, position));
  while (true) {
    MS_ASSIGN_OR_RETURN(MergeOutcome outcome,
                        MergeShardSummaries({&summary, 1}, vocab_size, params, position));
    if (outcome.complete) return std::move(outcome.result);
    // Terminates: every retry sends more candidates than before, and a shard
    // that sends all its valid ids is complete.
    const size_t sent = summary.candidates.size();
    if (!std::isnan(outcome.retry_log_normalizer)) {
      RefillNucleusCandidates(logits, vocab_size, params, outcome.retry_log_normalizer, &summary);
    }
    if (summary.candidates.size() == sent) {
      RefillCandidates(logits, vocab_size, outcome.retry_num_candidates, &summary);
    }
  }
}

absl::StatusOr<std::vector<SampleResult>> SampleBatch(absl::Span<const float> logits,
                                                      int64_t row_stride, int64_t vocab_size,
                                                      absl::Span<const RowSampling> rows) {
  if (row_stride < vocab_size) {
    return InvalidArgument("row_stride ", row_stride, " is below vocab_size ", vocab_size);
  }
  return MapRows<SampleResult>(
      logits, row_stride, rows, [&](absl::Span<const float> row, const RowSampling& sampling) {
        return SampleRow(row, vocab_size, sampling.params, sampling.position);
      });
}

std::string SampleResult::ToString() const {
  std::string out = absl::StrCat("SampleResult{token_id=", token_id);
  if (logprob.has_value()) absl::StrAppend(&out, " logprob=", *logprob);
  if (!top_logprobs.empty()) {
    absl::StrAppend(&out, " top_logprobs=[");
    for (size_t i = 0; i < top_logprobs.size(); ++i) {
      absl::StrAppend(&out, i ? " " : "", top_logprobs[i].id, ":", top_logprobs[i].logprob);
    }
    absl::StrAppend(&out, "]");
  }
  return out + "}";
}

std::ostream& operator<<(std::ostream& os, const SampleResult& result) {
  return os << result.ToString();
}

}  // namespace meshserve
