// SummarizeShard: one shard's part of a sampled token (see shard_summary.h).
//
// One pass validates the logits and selects the candidates with a bounded heap
// (a compare per id once it is full: no sort of the row); the ExpSums and the
// Gumbel winner are further passes, each run only when the params need it.
#include "common/sampling/shard_summary.h"

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

bool IsMasked(float logit) { return !(logit >= -kMaxAbsLogit); }

// The number of candidates the plan needs from every shard.
int64_t WantedCandidates(const SamplingPlan& plan, int64_t num_candidates) {
  int64_t wanted = std::max<int64_t>({1, plan.num_logprobs, num_candidates});
  if (!plan.greedy && plan.top_k > 0) {
    wanted = std::max(wanted, plan.top_k);
  } else if (!plan.greedy && plan.top_p_on && num_candidates == 0) {
    wanted = std::max(wanted, kDefaultTopPCandidates);
  }
  return wanted;
}

// Large counts: all valid ids, nth_element at `count`, sort the front.
std::vector<SampleCandidate> SelectManyCandidates(absl::Span<const float> logits, int64_t begin,
                                                  int64_t count) {
  std::vector<SampleCandidate> all;
  all.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!IsMasked(logits[i])) all.push_back({begin + static_cast<int64_t>(i), logits[i]});
  }
  if (count < static_cast<int64_t>(all.size())) {
    std::nth_element(all.begin(), all.begin() + count, all.end(), RanksBefore);
    all.resize(static_cast<size_t>(count));
  }
  std::sort(all.begin(), all.end(), RanksBefore);
  return all;
}

// The `count` valid ids of logits[0, n) ranking first, in RanksBefore order.
// A max-heap under RanksBefore keeps the worst kept candidate on top; ids come
// in ascending order, so a later id displaces it only with a larger logit.
// Above a few hundred, where the heap churns, nth_element is cheaper.
std::vector<SampleCandidate> SelectCandidates(absl::Span<const float> logits, int64_t begin,
                                              int64_t count) {
  if (count > 512) return SelectManyCandidates(logits, begin, count);
  std::vector<SampleCandidate> heap;
  heap.reserve(static_cast<size_t>(std::min<int64_t>(count, logits.size())));
  float worst = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = logits[i];
    if (IsMasked(logit)) continue;
    const SampleCandidate candidate{begin + static_cast<int64_t>(i), logit};
    if (static_cast<int64_t>(heap.size()) < count) {
      heap.push_back(candidate);
      std::push_heap(heap.begin(), heap.end(), RanksBefore);
    } else if (logit > worst) {
      std::pop_heap(heap.begin(), heap.end(), RanksBefore);
      heap.back() = candidate;
      std::push_heap(heap.begin(), heap.end(), RanksBefore);
    } else {
      continue;
    }
    if (static_cast<int64_t>(heap.size()) == count) worst = heap.front().logit;
  }
  std::sort_heap(heap.begin(), heap.end(), RanksBefore);
  return heap;
}

// Rejects NaN and too large logits; returns the number of valid ids.
absl::StatusOr<int64_t> CheckLogits(absl::Span<const float> logits, int64_t begin) {
  int64_t num_valid = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = logits[i];
    if (std::isnan(logit) || logit > kMaxAbsLogit) {
      return InvalidArgument("logit ", logit, " at id ", begin + static_cast<int64_t>(i),
                             " is not a number or above ", kMaxAbsLogit);
    }
    num_valid += IsMasked(logit) ? 0 : 1;
  }
  return num_valid;
}

// The ExpSum of logit * scale over the valid ids; the shard's max goes first so
// that terms far below it skip their exp().
ExpSum SumExp(absl::Span<const float> logits, int64_t begin, const SampleCandidate& top,
              double scale) {
  ExpSum sum;
  sum.Add(top.logit * scale);
  const size_t top_index = static_cast<size_t>(top.id - begin);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (i == top_index || IsMasked(logits[i])) continue;
    sum.Add(logits[i] * scale);
  }
  return sum;
}

// The Gumbel-max winner over the valid ids, starting from the shard's argmax
// (usually the winner, so most ids are skipped by the bounds in philox.h).
// A skipped id's exact score is provably below the winner's: the margin covers
// the rounding of x + bound (~1e-16 relative).
void FindGumbelWinner(absl::Span<const float> logits, int64_t begin, const SamplingPlan& plan,
                      uint64_t seed, int64_t position, ShardSummary* summary) {
  const SampleCandidate& top = summary->candidates.front();
  const double inv_t = plan.inv_temperature;
  int64_t best_id = top.id;
  float best_logit = top.logit;
  double best = top.logit * inv_t + GumbelFromBits(TokenRandomBits(seed, position, top.id));
  double bar = best - 1e-9 * (1 + std::abs(best));
  TokenBitsCache cache(seed, position);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = logits[i];
    const int64_t id = begin + static_cast<int64_t>(i);
    if (IsMasked(logit) || id == top.id) continue;
    const double x = logit * inv_t;
    if (x + kMaxGumbel < bar) continue;
    const uint64_t bits = cache.Bits(id);
    if (x + GumbelUpperBound(bits) < bar) continue;
    const double score = x + GumbelFromBits(bits);
    if (score > best || (score == best && id < best_id)) {
      best = score;
      best_id = id;
      best_logit = logit;
      bar = best - 1e-9 * (1 + std::abs(best));
    }
  }
  summary->gumbel_id = best_id;
  summary->gumbel_score = best;
  summary->gumbel_logit = best_logit;
}

}  // namespace

SamplingPlan PlanSampling(const SamplingParams& params, int64_t vocab_size) {
  SamplingPlan plan;
  plan.greedy = params.temperature < kGreedyTemperature;
  plan.inv_temperature = plan.greedy ? 1.0 : 1.0 / static_cast<double>(params.temperature);
  plan.top_k = plan.greedy || params.top_k <= 0 || params.top_k >= vocab_size ? 0 : params.top_k;
  plan.top_p_on = !plan.greedy && params.top_p < 1;
  plan.num_logprobs = params.num_logprobs;
  return plan;
}

absl::StatusOr<ShardSummary> SummarizeShard(absl::Span<const float> logits, int64_t begin,
                                            int64_t vocab_size, const SamplingParams& params,
                                            int64_t position, int64_t num_candidates) {
  MS_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (vocab_size < 1) return InvalidArgument("vocab_size ", vocab_size, " must be >= 1");
  if (begin < 0 || begin > std::numeric_limits<int64_t>::max() / 2) {
    return InvalidArgument("shard begin ", begin, " must be in [0, 2^62]");
  }
  if (position < 0) return InvalidArgument("position ", position, " must be >= 0");
  if (num_candidates < 0) {
    return InvalidArgument("num_candidates ", num_candidates, " must be >= 0");
  }
  ShardSummary summary;
  summary.begin = begin;
  summary.end = begin + static_cast<int64_t>(logits.size());
  const int64_t num_real = std::clamp<int64_t>(vocab_size - begin, 0, logits.size());
  const absl::Span<const float> real = logits.subspan(0, static_cast<size_t>(num_real));
  MS_ASSIGN_OR_RETURN(summary.num_valid, CheckLogits(real, begin));
  if (summary.num_valid == 0) return summary;

  const SamplingPlan plan = PlanSampling(params, vocab_size);
  summary.candidates = SelectCandidates(real, begin, WantedCandidates(plan, num_candidates));
  const SampleCandidate& top = summary.candidates.front();
  if (plan.num_logprobs >= 0) summary.logit_exp_sum = SumExp(real, begin, top, 1.0);
  if (!plan.greedy && plan.top_p_on && plan.top_k == 0) {
    summary.scaled_exp_sum = SumExp(real, begin, top, plan.inv_temperature);
  }
  if (plan.full_vocabulary()) {
    FindGumbelWinner(real, begin, plan, params.seed, position, &summary);
  }
  return summary;
}

absl::StatusOr<std::vector<ShardSummary>> SummarizeShardBatch(
    absl::Span<const float> logits, int64_t row_stride, int64_t begin, int64_t vocab_size,
    absl::Span<const RowSampling> rows) {
  return MapRows<ShardSummary>(
      logits, row_stride, rows, [&](absl::Span<const float> row, const RowSampling& sampling) {
        return SummarizeShard(row, begin, vocab_size, sampling.params, sampling.position);
      });
}

void RefillCandidates(absl::Span<const float> logits, int64_t vocab_size, int64_t num_candidates,
                      ShardSummary* summary) {
  const int64_t num_real = std::clamp<int64_t>(vocab_size - summary->begin, 0, logits.size());
  const int64_t count = std::max<int64_t>(
      num_candidates, static_cast<int64_t>(summary->candidates.size()));
  summary->candidates =
      SelectCandidates(logits.subspan(0, static_cast<size_t>(num_real)), summary->begin, count);
}

void RefillNucleusCandidates(absl::Span<const float> logits, int64_t vocab_size,
                             const SamplingParams& params, double log_z, ShardSummary* summary) {
  if (summary->candidates.empty()) return;
  constexpr int kBins = 2048;
  constexpr double kBinsPerUnit = 32;
  const int64_t num_real = std::clamp<int64_t>(vocab_size - summary->begin, 0, logits.size());
  const absl::Span<const float> real = logits.subspan(0, static_cast<size_t>(num_real));
  const double inv_t = PlanSampling(params, vocab_size).inv_temperature;
  const double x_max = summary->candidates.front().logit * inv_t;
  // bin = floor((x_max - x) * 32) >= 0; the same expression selects below.
  auto depth = [&](float logit) { return (x_max - logit * inv_t) * kBinsPerUnit; };
  std::vector<int64_t> counts(kBins, 0);
  for (float logit : real) {
    if (IsMasked(logit)) continue;
    const double d = depth(logit);
    if (d < kBins) ++counts[static_cast<int>(d)];
  }
  // An id in bin k has x > x_max - (k + 1) / 32; the slack covers rounding.
  const double target = static_cast<double>(params.top_p) * (1 + 1e-6);
  double mass = 0;
  double limit = std::numeric_limits<double>::infinity();  // all valid ids
  for (int k = 0; k < kBins; ++k) {
    mass += static_cast<double>(counts[k]) * std::exp(x_max - (k + 1) / kBinsPerUnit - log_z);
    if (mass >= target) {
      limit = k + 1;
      break;
    }
  }
  std::vector<SampleCandidate> selected;
  for (size_t i = 0; i < real.size(); ++i) {
    if (!IsMasked(real[i]) && depth(real[i]) < limit) {
      selected.push_back({summary->begin + static_cast<int64_t>(i), real[i]});
    }
  }
  // The selection is closed under RanksBefore (depth falls as the logit
  // grows), so when larger it holds the candidates sent before.
  if (selected.size() <= summary->candidates.size()) return;
  std::sort(selected.begin(), selected.end(), RanksBefore);
  summary->candidates = std::move(selected);
}

bool ShardSummary::operator==(const ShardSummary& o) const {
  return begin == o.begin && end == o.end && num_valid == o.num_valid &&
         candidates == o.candidates && logit_exp_sum == o.logit_exp_sum &&
         scaled_exp_sum == o.scaled_exp_sum && gumbel_id == o.gumbel_id &&
         gumbel_score == o.gumbel_score && gumbel_logit == o.gumbel_logit;
}

std::string ShardSummary::ToString() const {
  std::string out = absl::StrCat("ShardSummary{ids=[", begin, ", ", end, ") num_valid=",
                                 num_valid, " candidates=[");
  for (size_t i = 0; i < candidates.size() && i < 8; ++i) {
    absl::StrAppend(&out, i ? " " : "", candidates[i].id, ":", candidates[i].logit);
  }
  if (candidates.size() > 8) absl::StrAppend(&out, " ... (", candidates.size(), ")");
  absl::StrAppend(&out, "] logit_exp_sum=", logit_exp_sum.ToString(),
                  " scaled_exp_sum=", scaled_exp_sum.ToString(), " gumbel_id=", gumbel_id,
                  " gumbel_score=", gumbel_score, "}");
  return out;
}

std::ostream& operator<<(std::ostream& os, const ShardSummary& summary) {
  return os << summary.ToString();
}

}  // namespace meshserve
