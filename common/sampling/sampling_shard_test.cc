// The sharded sampler: for many random rows (ties, masks, padding), params and
// splits into 1, 2, 3, 4 and 8 uneven shards, merging the shards' summaries
// gives exactly the whole-row SampleResult; a merge whose shards sent too few
// candidates for the top_p nucleus says so instead of sampling; bad shard sets
// are rejected.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/sampling/sampler.h"
#include "common/sampling/shard_summary.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

// Split [0, width) into num_shards contiguous ranges of random (possibly
// empty) sizes; returns the boundaries.
std::vector<int64_t> RandomSplit(std::mt19937_64& rng, int64_t width, int num_shards) {
  std::vector<int64_t> cuts = {0, width};
  for (int i = 1; i < num_shards; ++i) cuts.push_back(static_cast<int64_t>(rng() % (width + 1)));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

std::vector<float> RandomLogits(std::mt19937_64& rng, int64_t width, int style) {
  std::normal_distribution<float> normal(0, style == 0 ? 1.0f : 4.0f);
  std::vector<float> row(width);
  for (float& v : row) {
    v = normal(rng);
    if (style == 2) v = std::round(v) / 2;  // many ties
    if (rng() % 23 == 0) v = -std::numeric_limits<float>::infinity();  // masked
  }
  return row;
}

SamplingParams RandomParams(std::mt19937_64& rng, int64_t vocab) {
  SamplingParams p;
  const float temperatures[] = {0, 0.25f, 0.7f, 1, 1.5f, 4};
  const int32_t top_ks[] = {0, -1, 1, 3, 17, static_cast<int32_t>(vocab)};
  const float top_ps[] = {1, 0.05f, 0.5f, 0.9f, 0.99f};
  p.temperature = temperatures[rng() % 6];
  p.top_k = top_ks[rng() % 6];
  p.top_p = top_ps[rng() % 5];
  p.seed = rng();
  p.num_logprobs = static_cast<int32_t>(rng() % (kMaxLogprobs + 2)) - 1;
  return p;
}

struct ShardedOutcome {
  SampleResult result;
  int retries = 0;
  int nucleus_refills_completed = 0;
};

// Summarises with the default count, refills every shard with
// RefillNucleusCandidates and merges; true (and the result) when complete.
bool RefillNucleusRound(const std::vector<float>& row, const std::vector<int64_t>& cuts,
                        int64_t vocab, const SamplingParams& params, int64_t position,
                        const MergeOutcome& incomplete, ShardedOutcome* out) {
  std::vector<ShardSummary> shards;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    const absl::Span<const float> part(row.data() + cuts[s], cuts[s + 1] - cuts[s]);
    ShardSummary summary = *SummarizeShard(part, cuts[s], vocab, params, position, 1);
    RefillNucleusCandidates(part, vocab, params, incomplete.retry_log_normalizer, &summary);
    shards.push_back(std::move(summary));
  }
  absl::StatusOr<MergeOutcome> merged = MergeShardSummaries(shards, vocab, params, position);
  EXPECT_TRUE(merged.ok()) << merged.status();
  if (!merged.ok() || !merged->complete) return false;
  out->result = merged->result;
  ++out->nucleus_refills_completed;
  return true;
}

// The worker's loop: summarise every shard with `num_candidates`, merge, and
// resummarise with more when the merge asks.
ShardedOutcome SampleSharded(const std::vector<float>& row, const std::vector<int64_t>& cuts,
                             int64_t vocab, const SamplingParams& params, int64_t position,
                             int64_t num_candidates) {
  ShardedOutcome out;
  while (true) {
    std::vector<ShardSummary> shards;
    for (size_t s = 0; s + 1 < cuts.size(); ++s) {
      const absl::Span<const float> part(row.data() + cuts[s], cuts[s + 1] - cuts[s]);
      absl::StatusOr<ShardSummary> summary =
          SummarizeShard(part, cuts[s], vocab, params, position, num_candidates);
      EXPECT_TRUE(summary.ok()) << summary.status();
      shards.push_back(*summary);
    }
    // Merge order does not matter.
    std::shuffle(shards.begin(), shards.end(), std::mt19937_64(position));
    absl::StatusOr<MergeOutcome> merged = MergeShardSummaries(shards, vocab, params, position);
    EXPECT_TRUE(merged.ok()) << merged.status();
    if (!merged.ok() || merged->complete) {
      out.result = merged.ok() ? merged->result : SampleResult();
      return out;
    }
    EXPECT_GT(merged->retry_num_candidates, num_candidates);
    ++out.retries;
    if (!std::isnan(merged->retry_log_normalizer) && position % 2 == 1) {
      // The one-step retry: each shard refills by the nucleus bound.
      if (RefillNucleusRound(row, cuts, vocab, params, position, *merged, &out)) return out;
    }
    num_candidates = merged->retry_num_candidates;
  }
}

TEST(SamplingShardTest, MergedShardsEqualTheWholeRow) {
  std::mt19937_64 rng(11);
  int total_retries = 0, compared = 0, nucleus_refills = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int64_t vocab = 1 + static_cast<int64_t>(rng() % 400);
    const int64_t width = vocab + static_cast<int64_t>(rng() % 9);  // padding
    std::vector<float> row = RandomLogits(rng, width, trial % 3);
    row[rng() % vocab] = 0.5f;  // at least one valid id
    for (int64_t i = vocab; i < width; ++i) row[i] = 1e30f;  // padding is never read
    const SamplingParams params = RandomParams(rng, vocab);
    const int64_t position = static_cast<int64_t>(rng() % 100000);
    absl::StatusOr<SampleResult> whole = SampleRow(row, vocab, params, position);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int num_shards : {1, 2, 3, 4, 8}) {
      const std::vector<int64_t> cuts = RandomSplit(rng, width, num_shards);
      // Few candidates force the retry path; 0 is the default count.
      const int64_t num_candidates = trial % 2 ? 0 : 1 + static_cast<int64_t>(rng() % 4);
      const ShardedOutcome sharded =
          SampleSharded(row, cuts, vocab, params, position, num_candidates);
      EXPECT_EQ(sharded.result, *whole) << "trial " << trial << " shards " << num_shards;
      total_retries += sharded.retries;
      nucleus_refills += sharded.nucleus_refills_completed;
      ++compared;
    }
  }
  printf("compared %d sharded samples, %d retries for more candidates, %d completed by "
         "RefillNucleusCandidates\n", compared, total_retries, nucleus_refills);
  EXPECT_GT(total_retries, 100);  // the retry paths ran
  EXPECT_GT(nucleus_refills, 20);
}

// A GPT-2-wide row split over 2 shards.
TEST(SamplingShardTest, PaddedGpt2WidthRowMatches) {
  std::mt19937_64 rng(12);
  const int64_t vocab = 50257, width = 50264;
  std::vector<float> row = RandomLogits(rng, width, 0);
  for (const SamplingParams& params :
       {SamplingParams{1.0f, 0, 1.0f, 3, 5}, SamplingParams{0.8f, 0, 0.95f, 4, 0},
        SamplingParams{1.0f, 50, 0.9f, 5, 20}, SamplingParams{0.0f, 0, 1.0f, 6, 2}}) {
    const SampleResult whole = *SampleRow(row, vocab, params, 42);
    EXPECT_EQ(SampleSharded(row, {0, 25132, width}, vocab, params, 42, 0).result, whole);
  }
}

TEST(SamplingShardTest, BatchOfShardsEqualsRowByRow) {
  std::mt19937_64 rng(13);
  const int64_t vocab = 90, width = 96, rows = 4, shard_width = 48;
  const std::vector<float> logits = RandomLogits(rng, width * rows, 0);
  std::vector<RowSampling> sampling;
  for (int r = 0; r < rows; ++r) sampling.push_back({RandomParams(rng, vocab), 10 + r});
  std::vector<std::vector<ShardSummary>> per_shard;
  for (int64_t begin : {int64_t{0}, shard_width}) {
    std::vector<float> slice;  // this shard's columns of every row
    for (int r = 0; r < rows; ++r) {
      slice.insert(slice.end(), logits.begin() + r * width + begin,
                   logits.begin() + r * width + begin + shard_width);
    }
    ASSERT_OK_AND_ASSIGN(std::vector<ShardSummary> summaries,
                         SummarizeShardBatch(slice, shard_width, begin, vocab, sampling));
    per_shard.push_back(std::move(summaries));
  }
  for (int r = 0; r < rows; ++r) {
    const std::vector<ShardSummary> shards = {per_shard[0][r], per_shard[1][r]};
    const std::vector<int64_t> cuts = {0, shard_width, width};
    const std::vector<float> row(logits.begin() + r * width, logits.begin() + (r + 1) * width);
    ASSERT_OK_AND_ASSIGN(MergeOutcome merged,
                         MergeShardSummaries(shards, vocab, sampling[r].params, 10 + r));
    const SampleResult expected = *SampleRow(row, vocab, sampling[r].params, 10 + r);
    if (merged.complete) {
      EXPECT_EQ(merged.result, expected) << r;
    } else {
      EXPECT_EQ(SampleSharded(row, cuts, vocab, sampling[r].params, 10 + r, 0).result, expected);
    }
  }
  sampling[2].params.temperature = -1;
  EXPECT_THAT(SummarizeShardBatch(std::vector<float>(48 * rows), shard_width, 0, vocab, sampling),
              StatusIs(absl::StatusCode::kInvalidArgument, "row 2: temperature -1"));
  EXPECT_THAT(SummarizeShardBatch(std::vector<float>(47), shard_width, 0, vocab, sampling),
              StatusIs(absl::StatusCode::kInvalidArgument, "47 logits are not 4 rows of 48"));
}

TEST(SamplingShardTest, ReportsWhenTheNucleusPassesTheCandidates) {
  // Flat logits: a 0.9 nucleus needs ~90% of the ids; one candidate per shard
  // is not enough and the merge must say so.
  const std::vector<float> row(64, 0.0f);
  const SamplingParams params{1.0f, 0, 0.9f, 1, -1};
  std::vector<ShardSummary> shards;
  for (int64_t begin : {0, 32}) {
    shards.push_back(*SummarizeShard(absl::MakeConstSpan(row).subspan(begin, 32), begin, 64,
                                     params, 0, 1));
  }
  ASSERT_OK_AND_ASSIGN(MergeOutcome merged, MergeShardSummaries(shards, 64, params, 0));
  EXPECT_FALSE(merged.complete);
  EXPECT_GE(merged.retry_num_candidates, 2);
  for (int s = 0; s < 2; ++s) {
    RefillCandidates(absl::MakeConstSpan(row).subspan(32 * s, 32), 64, 32, &shards[s]);
  }
  ASSERT_OK_AND_ASSIGN(merged, MergeShardSummaries(shards, 64, params, 0));
  EXPECT_TRUE(merged.complete);
  EXPECT_EQ(merged.result, *SampleRow(row, 64, params, 0));
}

TEST(SamplingShardTest, RejectsShardsThatDoNotTileTheRow) {
  const std::vector<float> row(10, 1.0f);
  const SamplingParams params;
  const ShardSummary a = *SummarizeShard(absl::MakeConstSpan(row).subspan(0, 5), 0, 10, params, 0);
  const ShardSummary b = *SummarizeShard(absl::MakeConstSpan(row).subspan(4, 6), 4, 10, params, 0);
  const ShardSummary c = *SummarizeShard(absl::MakeConstSpan(row).subspan(6, 4), 6, 10, params, 0);
  EXPECT_THAT(MergeShardSummaries({a, b}, 10, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "[4, 10) does not start at 5"));
  EXPECT_THAT(MergeShardSummaries({a, c}, 10, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "[6, 10) does not start at 5"));
  EXPECT_THAT(MergeShardSummaries({a}, 10, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "cover ids [0, 5) of vocab_size 10"));
  EXPECT_THAT(MergeShardSummaries({}, 10, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "no shard summaries"));
  // Summarised without logprobs, merged asking for them.
  SamplingParams with_logprobs = params;
  with_logprobs.num_logprobs = 3;
  EXPECT_THAT(MergeShardSummaries({a}, 5, with_logprobs, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "other sampling params"));
  // A corrupt summary from a peer.
  ShardSummary bad = a;
  bad.candidates[0].id = 7;
  EXPECT_THAT(MergeShardSummaries({bad}, 5, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "candidate 0 (id 7) is outside"));
  bad = a;
  bad.gumbel_id = 5;
  EXPECT_THAT(MergeShardSummaries({bad}, 5, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "winner id 5"));
  bad = a;
  bad.num_valid = 0;
  EXPECT_THAT(MergeShardSummaries({bad}, 5, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "has 0 valid ids"));
  EXPECT_THAT(SummarizeShard(row, -1, 10, params, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "shard begin -1"));
  EXPECT_THAT(SummarizeShard(row, 0, 10, params, 0, -4),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_candidates -4"));
}

}  // namespace
}  // namespace meshserve
