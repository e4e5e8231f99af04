// Statistical test of the sampler: over 200k positions with a fixed seed, the
// empirical token frequencies on an 8-token vocabulary must match
// softmax(logits / T) restricted by top_k / top_p, by a chi-square test at
// p < 1e-6 (so it does not flake, but a wrong distribution fails: the negative
// control below checks the test rejects a temperature 10% off). The expected
// probabilities come from NumPy (testdata/gen_sampling_reference.py), not from
// the sampler's code.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sampling/sampler.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

struct ReferenceCase {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  double probs[8];
  double chi2_critical;
};
#include "common/sampling/testdata/sampling_reference.inc"

constexpr int kVocab = 8;
constexpr int kRowWidth = 16;  // padded: ids 8..15 hold huge logits
constexpr int64_t kDraws = 200000;
// The fixed seed; MS_SAMPLING_TEST_SEED overrides it to explore others.
uint64_t Seed() {
  const char* env = std::getenv("MS_SAMPLING_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 0x5eed'1234'abcd'0001ULL;
}

std::array<int64_t, kRowWidth> CountDraws(const ReferenceCase& c) {
  std::vector<float> row(kReferenceLogits, kReferenceLogits + kVocab);
  row.resize(kRowWidth, 50.0f);  // padding: would win every draw if read
  SamplingParams params;
  params.temperature = c.temperature;
  params.top_k = c.top_k;
  params.top_p = c.top_p;
  params.seed = Seed();
  std::array<int64_t, kRowWidth> counts{};
  for (int64_t position = 0; position < kDraws; ++position) {
    absl::StatusOr<SampleResult> result = SampleRow(row, kVocab, params, position);
    if (!result.ok()) {
      ADD_FAILURE() << result.status();
      return counts;
    }
    ++counts[result->token_id];
  }
  return counts;
}

// Pearson's chi-square over the ids with expected probability > 0; an id with
// probability 0 that was drawn makes it infinite.
double ChiSquare(const std::array<int64_t, kRowWidth>& counts, const double* probs) {
  double chi2 = 0;
  for (int id = 0; id < kRowWidth; ++id) {
    const double p = id < kVocab ? probs[id] : 0;
    if (p == 0) {
      if (counts[id] > 0) return 1e300;
      continue;
    }
    const double expected = p * kDraws;
    chi2 += (counts[id] - expected) * (counts[id] - expected) / expected;
  }
  return chi2;
}

TEST(SamplingStatisticsTest, FrequenciesFollowTheRestrictedSoftmax) {
  for (const ReferenceCase& c : kReferenceCases) {
    SCOPED_TRACE(absl::StrCat(c.name, " seed ", Seed()));
    const std::array<int64_t, kRowWidth> counts = CountDraws(c);
    const double chi2 = ChiSquare(counts, c.probs);
    EXPECT_LT(chi2, c.chi2_critical);
    for (int id = 0; id < kVocab; ++id) {
      if (c.probs[id] == 0) {
        EXPECT_EQ(counts[id], 0) << "id " << id << " is outside the kept set";
      }
    }
    for (int id = kVocab; id < kRowWidth; ++id) EXPECT_EQ(counts[id], 0) << "padded id " << id;
    printf("%-22s chi2 = %8.3f (threshold %.3f)\n", c.name, chi2, c.chi2_critical);
  }
}

// The test's power: the same draws against the probabilities of a temperature
// 10% off must be rejected, and so must the top_k case against the unfiltered
// distribution.
TEST(SamplingStatisticsTest, RejectsAWrongDistribution) {
  const ReferenceCase& t1 = kReferenceCases[0];
  ASSERT_STREQ(t1.name, "t1");
  EXPECT_GT(ChiSquare(CountDraws(t1), kWrongTemperatureProbs), t1.chi2_critical);
  const ReferenceCase& topk = kReferenceCases[2];
  ASSERT_STREQ(topk.name, "t2_topk3");
  ReferenceCase unfiltered = topk;
  unfiltered.top_k = 0;
  EXPECT_GT(ChiSquare(CountDraws(unfiltered), topk.probs), topk.chi2_critical);
}

}  // namespace
}  // namespace meshserve
