// Tests of the sampler's parts and whole-row behaviour: Philox known answers,
// the Gumbel bound, ExpSum exactness, params validation, greedy, padding and
// masks, determinism, logprobs against an independent long double
// log_softmax, the batch entry and bad inputs.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "common/sampling/exp_sum.h"
#include "common/sampling/philox.h"
#include "common/sampling/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams Params(float temperature, int32_t top_k = 0, float top_p = 1.0f,
                      uint64_t seed = 7, int32_t num_logprobs = -1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  p.num_logprobs = num_logprobs;
  return p;
}

std::vector<float> RandomRow(std::mt19937_64& rng, int n, float sd) {
  std::normal_distribution<float> normal(0, sd);
  std::vector<float> row(n);
  for (float& v : row) v = normal(rng);
  return row;
}

// Random123 tests/kat_vectors, the three "philox4x32 10" lines.
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                          {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, GumbelMatchesItsFormulaAndStaysBelowTheBound) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> bits = {0, ~uint64_t{0}, uint64_t{1} << 63, 4095, ~uint64_t{4095}};
  for (int i = 0; i < 100000; ++i) bits.push_back(rng());
  for (uint64_t b : bits) {
    const long double u = (static_cast<long double>(b >> 12) + 0.5L) / 4503599627370496.0L;
    const long double g = -std::log(-std::log(u));
    EXPECT_NEAR(GumbelFromBits(b), static_cast<double>(g), 1e-12 * (1 + std::fabs(g))) << b;
    EXPECT_LE(GumbelFromBits(b), GumbelUpperBound(b)) << b;
    EXPECT_LE(GumbelUpperBound(b), kMaxGumbel);
    EXPECT_GT(UniformFromBits(b), 0.0);
    EXPECT_LT(UniformFromBits(b), 1.0);
  }
}

TEST(ExpSumTest, AnyGroupingGivesTheSameBitsAndTheRightValue) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> values = RandomRow(rng, 300, trial % 2 ? 40.0f : 3.0f);
    ExpSum whole;
    long double max = -1e300L, reference = 0;
    for (float v : values) {
      whole.Add(v);
      max = std::max<long double>(max, v);
    }
    for (float v : values) reference += std::exp(static_cast<long double>(v) - max);
    EXPECT_NEAR(whole.Log(), static_cast<double>(std::log(reference) + max), 1e-12);
    // A random split into parts, merged in reverse order, added in reverse.
    std::vector<ExpSum> parts(1 + rng() % 7);
    for (int i = static_cast<int>(values.size()) - 1; i >= 0; --i) {
      parts[rng() % parts.size()].Add(values[i]);
    }
    ExpSum merged;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) merged.Merge(*it);
    EXPECT_EQ(merged, whole) << merged.ToString() << " vs " << whole.ToString();
  }
  EXPECT_TRUE(ExpSum().empty());
  EXPECT_EQ(ExpSum().Log(), -std::numeric_limits<double>::infinity());
}

TEST(ValidateSamplingParamsTest, RejectsEachBadFieldByName) {
  EXPECT_THAT(ValidateSamplingParams(SamplingParams()), IsOk());
  EXPECT_THAT(ValidateSamplingParams(Params(-0.5f)),
              StatusIs(absl::StatusCode::kInvalidArgument, "temperature -0.5 must be finite and >= 0"));
  EXPECT_THAT(ValidateSamplingParams(Params(kInf)),
              StatusIs(absl::StatusCode::kInvalidArgument, "temperature inf must be finite and >= 0"));
  EXPECT_THAT(ValidateSamplingParams(Params(std::nanf(""))),
              StatusIs(absl::StatusCode::kInvalidArgument, "temperature nan must be finite and >= 0"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, -2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "top_k -2 must be >= -1 (0 and -1 turn it off)"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, -1)), IsOk());
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, 0.0f)),
              StatusIs(absl::StatusCode::kInvalidArgument, "top_p 0 must be in (0, 1]"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, 1.5f)),
              StatusIs(absl::StatusCode::kInvalidArgument, "top_p 1.5 must be in (0, 1]"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, std::nanf(""))),
              StatusIs(absl::StatusCode::kInvalidArgument, "top_p nan must be in (0, 1]"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, 1, 0, -2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "logprobs -2 must be in [0, 20]"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, 1, 0, kMaxLogprobs + 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "logprobs 21 must be in [0, 20]"));
  EXPECT_THAT(ValidateSamplingParams(Params(1, 0, 1, 0, kMaxLogprobs)), IsOk());
}

TEST(SamplerTest, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (uint64_t seed : {0, 1, 99}) {
    for (int64_t position : {0, 5, 1000}) {
      EXPECT_EQ(SampleRow(row, 5, Params(0, 0, 1, seed), position)->token_id, 1);
      // Below kGreedyTemperature is greedy too, top_k / top_p ignored.
      EXPECT_EQ(SampleRow(row, 5, Params(1e-6f, 2, 0.1f, seed), position)->token_id, 1);
    }
  }
  const std::vector<float> all_equal(100, 0.25f);
  EXPECT_EQ(SampleRow(all_equal, 100, Params(0), 3)->token_id, 0);
}

TEST(SamplerTest, NeverSamplesPaddedOrMaskedIds) {
  // Ids 6..9 are padding with the largest logits (and garbage); ids 1 and 4
  // are masked.
  const std::vector<float> row = {0, -kInf, 0, 0, std::numeric_limits<float>::lowest(), 0,
                                  100, kInf, std::nanf(""), 1e30f};
  std::set<int64_t> seen;
  for (const SamplingParams& params :
       {Params(0), Params(1), Params(5, 3), Params(2, 0, 0.9f), Params(1, 0, 1, 3, 20)}) {
    for (int64_t position = 0; position < 300; ++position) {
      absl::StatusOr<SampleResult> result = SampleRow(row, 6, params, position);
      ASSERT_THAT(result, IsOk());
      seen.insert(result->token_id);
      for (const TokenLogprob& t : result->top_logprobs) {
        EXPECT_TRUE(t.id == 0 || t.id == 2 || t.id == 3 || t.id == 5) << t.id;
      }
    }
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 2, 3, 5}));
}

TEST(SamplerTest, SameSeedAndPositionGiveTheSameToken) {
  std::mt19937_64 rng(3);
  const std::vector<float> row = RandomRow(rng, 1000, 1.0f);
  for (const SamplingParams& params : {Params(1), Params(0.7f, 40), Params(1.2f, 0, 0.9f)}) {
    std::set<int64_t> tokens_over_positions;
    std::set<int64_t> tokens_over_seeds;
    for (int64_t position = 0; position < 64; ++position) {
      const int64_t a = SampleRow(row, 1000, params, position)->token_id;
      EXPECT_EQ(SampleRow(row, 1000, params, position)->token_id, a);
      tokens_over_positions.insert(a);
      SamplingParams other = params;
      other.seed = 1000 + position;
      tokens_over_seeds.insert(SampleRow(row, 1000, other, 17)->token_id);
    }
    // With ~these flat distributions, 64 draws are far from all equal.
    EXPECT_GT(tokens_over_positions.size(), 20u);
    EXPECT_GT(tokens_over_seeds.size(), 20u);
  }
  // The draws themselves: (seed, position, id) -> bits, a different position
  // or seed gives different bits.
  EXPECT_EQ(TokenRandomBits(5, 9, 100), TokenRandomBits(5, 9, 100));
  EXPECT_NE(TokenRandomBits(5, 9, 100), TokenRandomBits(5, 10, 100));
  EXPECT_NE(TokenRandomBits(5, 9, 100), TokenRandomBits(6, 9, 100));
  // An even id and the next share a Philox call, one half each.
  const PhiloxCounter pair = Philox4x32_10({9, 0, 50, 0}, {5, 0});
  EXPECT_EQ(TokenRandomBits(5, 9, 100), (uint64_t{pair[1]} << 32) | pair[0]);
  EXPECT_EQ(TokenRandomBits(5, 9, 101), (uint64_t{pair[3]} << 32) | pair[2]);
  const PhiloxCounter wide = Philox4x32_10({9, 1, 7, 1}, {5, 3});
  EXPECT_EQ(TokenRandomBits((uint64_t{3} << 32) | 5, (int64_t{1} << 32) | 9,
                            ((int64_t{1} << 32) | 7) * 2 + 1),
            (uint64_t{wide[3]} << 32) | wide[2]);
  TokenBitsCache cache(5, 9);
  for (int64_t id : {0, 1, 2, 5, 6, 7, 100, 101, 103}) {
    EXPECT_EQ(cache.Bits(id), TokenRandomBits(5, 9, id)) << id;
  }
}

// log_softmax of the raw logits in long double, straight from the definition.
std::vector<long double> ReferenceLogSoftmax(const std::vector<float>& row, int vocab) {
  long double max = -1e300L, sum = 0;
  for (int i = 0; i < vocab; ++i) max = std::max<long double>(max, row[i]);
  for (int i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  std::vector<long double> out(vocab);
  for (int i = 0; i < vocab; ++i) out[i] = row[i] - max - std::log(sum);
  return out;
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    const int vocab = 50 + trial * 13;
    std::vector<float> row = RandomRow(rng, vocab + 7, 1.0f + trial % 5);
    const std::vector<long double> reference = ReferenceLogSoftmax(row, vocab);
    std::vector<int> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const int n = 1 + trial % kMaxLogprobs;
    // Temperature, top_k and top_p change the token, never the logprobs.
    const SamplingParams params = Params(0.3f + trial % 3, trial % 4 * 5, 0.5f + trial % 2 * 0.3f,
                                         trial, n);
    ASSERT_OK_AND_ASSIGN(SampleResult result, SampleRow(row, vocab, params, trial));
    ASSERT_TRUE(result.logprob.has_value());
    EXPECT_NEAR(*result.logprob, static_cast<double>(reference[result.token_id]), 1e-5);
    ASSERT_EQ(result.top_logprobs.size(), static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(result.top_logprobs[j].id, order[j]);
      EXPECT_NEAR(result.top_logprobs[j].logprob, static_cast<double>(reference[order[j]]),
                  1e-5);
    }
  }
}

TEST(SamplerTest, LogprobsOfAFixedRowMatchNumPy) {
  const std::vector<float> row = {0.3f, 2.0f, -1.0f, 1.2f, -2.5f, 1.5f, 0.0f, 1.2f};
  // kLogSoftmax of testdata/sampling_reference.inc, np.log(softmax(row)).
  const double numpy[8] = {-2.7592140963070126, -1.059214108227942, -4.059214108227942,
                           -1.859214060544226,  -5.559214108227942, -1.5592141082279418,
                           -3.059214108227942,  -1.859214060544226};
  ASSERT_OK_AND_ASSIGN(SampleResult result, SampleRow(row, 8, Params(0, 0, 1, 0, 8), 0));
  EXPECT_EQ(result.token_id, 1);
  EXPECT_NEAR(*result.logprob, numpy[1], 1e-6);
  std::vector<int64_t> ids;
  for (const TokenLogprob& t : result.top_logprobs) {
    ids.push_back(t.id);
    EXPECT_NEAR(t.logprob, numpy[t.id], 1e-6);
  }
  EXPECT_THAT(ids, ElementsAre(1, 5, 3, 7, 0, 6, 2, 4));  // ties 3, 7: lower id first
  // num_logprobs 0: the token's only; -1: none.
  EXPECT_TRUE(SampleRow(row, 8, Params(1, 0, 1, 0, 0), 0)->top_logprobs.empty());
  EXPECT_TRUE(SampleRow(row, 8, Params(1, 0, 1, 0, 0), 0)->logprob.has_value());
  EXPECT_FALSE(SampleRow(row, 8, Params(1, 0, 1, 0, -1), 0)->logprob.has_value());
}

TEST(SamplerTest, TopKOneIsTheArgmaxAndTinyTopPIsTheMostLikely) {
  std::mt19937_64 rng(5);
  const std::vector<float> row = RandomRow(rng, 500, 1.0f);
  const int64_t argmax = std::max_element(row.begin(), row.end()) - row.begin();
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(SampleRow(row, 500, Params(3.0f, 1), position)->token_id, argmax);
    EXPECT_EQ(SampleRow(row, 500, Params(3.0f, 0, 1e-6f), position)->token_id, argmax);
  }
}

// The sampler's token against a brute-force reference written from the
// definitions: sort, cut by top_k, cut by top_p (long double), then the
// argmax of x + Gumbel over every kept id, with no pruning. Cases within 1e-9
// of a top_p boundary are skipped (rounding may fall either way there).
TEST(SamplerTest, TokenEqualsABruteForceGumbelMax) {
  std::mt19937_64 rng(8);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 2 + static_cast<int>(rng() % 700);
    const std::vector<float> row = RandomRow(rng, vocab, 0.5f + trial % 4);
    const int32_t top_k = trial % 3 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 40);
    const float top_p = trial % 2 ? 1.0f : 0.3f + (rng() % 7) * 0.1f;
    const SamplingParams params = Params(0.2f + (trial % 5) * 0.5f, top_k, top_p, rng());
    const int64_t position = static_cast<int64_t>(rng() % 1000000);
    std::vector<int> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    if (params.top_k > 0 && params.top_k < vocab) order.resize(params.top_k);
    const long double t = params.temperature;
    bool near_boundary = false;
    if (params.top_p < 1) {
      long double z = 0, cumulative = 0;
      for (int id : order) z += std::exp(row[id] / t - row[order[0]] / t);
      size_t n = 0;
      while (n < order.size()) {
        cumulative += std::exp(row[order[n]] / t - row[order[0]] / t) / z;
        ++n;
        near_boundary |= std::fabs(cumulative - params.top_p) < 1e-9L;
        if (cumulative >= params.top_p) break;
      }
      order.resize(n);
    }
    if (near_boundary) continue;
    int64_t best = -1;
    double best_score = 0;
    for (int id : order) {
      const double score = row[id] * (1.0 / static_cast<double>(params.temperature)) +
                           GumbelFromBits(TokenRandomBits(params.seed, position, id));
      if (best < 0 || score > best_score || (score == best_score && id < best)) {
        best = id;
        best_score = score;
      }
    }
    EXPECT_EQ(SampleRow(row, vocab, params, position)->token_id, best) << "trial " << trial;
    ++checked;
  }
  EXPECT_GT(checked, 390);
}

TEST(SamplerTest, BatchEqualsRowByRow) {
  std::mt19937_64 rng(6);
  const int vocab = 300, stride = 320, rows = 6;
  const std::vector<float> logits = RandomRow(rng, stride * rows, 2.0f);
  const std::vector<RowSampling> sampling = {
      {Params(0), 3},           {Params(1, 0, 1, 11), 4},      {Params(0.8f, 20, 1, 12), 5},
      {Params(1, 0, 0.9f, 13), 6}, {Params(1.5f, 50, 0.7f, 14, 5), 7}, {Params(1, 0, 1, 15, 0), 0}};
  ASSERT_OK_AND_ASSIGN(std::vector<SampleResult> batch,
                       SampleBatch(logits, stride, vocab, sampling));
  ASSERT_EQ(batch.size(), static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const absl::Span<const float> row(logits.data() + r * stride, stride);
    EXPECT_EQ(batch[r], *SampleRow(row, vocab, sampling[r].params, sampling[r].position)) << r;
  }
  EXPECT_THAT(SampleBatch(logits, 299, vocab, sampling),
              StatusIs(absl::StatusCode::kInvalidArgument, "row_stride 299"));
  EXPECT_THAT(SampleBatch(absl::MakeSpan(logits).subspan(1), stride, vocab, sampling),
              StatusIs(absl::StatusCode::kInvalidArgument, "not 6 rows of 320"));
  std::vector<RowSampling> bad = sampling;
  bad[4].params.top_p = 2;
  EXPECT_THAT(SampleBatch(logits, stride, vocab, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, "row 4: top_p 2"));
}

TEST(SamplerTest, RejectsBadInputsWithTheOffendingValue) {
  std::vector<float> row = {1, 2, 3, 4};
  EXPECT_THAT(SampleRow(row, 5, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "shorter than vocab_size 5"));
  EXPECT_THAT(SampleRow(row, 0, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "vocab_size 0"));
  EXPECT_THAT(SampleRow(row, 4, Params(1), -3),
              StatusIs(absl::StatusCode::kInvalidArgument, "position -3"));
  EXPECT_THAT(SampleRow(row, 4, Params(-1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "temperature -1"));
  row[2] = std::nanf("");
  EXPECT_THAT(SampleRow(row, 4, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "logit nan at id 2"));
  row[2] = kInf;
  EXPECT_THAT(SampleRow(row, 4, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "logit inf at id 2"));
  row[2] = 2e9f;
  EXPECT_THAT(SampleRow(row, 4, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "logit 2e+09 at id 2"));
  const std::vector<float> masked = {-kInf, -2e9f, 5};
  EXPECT_THAT(SampleRow(masked, 2, Params(1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "every logit"));
  EXPECT_EQ(SampleRow(masked, 3, Params(1, 0, 0.5f), 0)->token_id, 2);
}

}  // namespace
}  // namespace meshserve
