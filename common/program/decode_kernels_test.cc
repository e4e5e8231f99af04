// The generation kernels: CachedStepAttention fed step by step (prefill
// chunks, padding slots, decode tokens, several sequences packed) equals
// CausalAttention over each whole sequence; SelectRows and SampleRows.
#include "common/program/decode_kernels.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

Tensor Random(std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(DType::kFloat32, shape);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Rows [begin, end) of x [1, S, H, D] as [1, end - begin, H, D], padded with
// zero rows to `slots`.
Tensor Rows(const Tensor& x, int64_t begin, int64_t end, int64_t slots) {
  const int64_t row = x.dim(2) * x.dim(3);
  Tensor out = Tensor::Zeros(DType::kFloat32, {1, slots, x.dim(2), x.dim(3)});
  std::copy(x.data<float>() + begin * row, x.data<float>() + end * row, out.data<float>());
  return out;
}

class DecodeKernelsTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

// One sequence: a prefill chunk of `first` tokens (in `slots` >= first slots),
// then one token a step; every output row equals whole-sequence attention.
TEST_P(DecodeKernelsTest, CachedStepsEqualWholeSequenceAttention) {
  const auto [first, slots] = GetParam();
  std::mt19937 rng(first * 31 + slots);
  const int64_t S = 12, N = 4, K = 2, D = 8;
  Tensor q = Random({1, S, N, D}, rng), k = Random({1, S, K, D}, rng), v = Random({1, S, K, D}, rng);
  ASSERT_OK_AND_ASSIGN(Tensor want, CausalAttention(q, k, v, 0.3f));
  KvBlockPoolOptions o;
  o.block_tokens = 4;
  o.num_layers = 1;
  o.num_kv_heads = K;
  o.head_dim = D;
  o.capacity_bytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvCache> cache, KvCache::Create(o));
  int64_t past = 0;
  while (past < S) {
    const int64_t n = past == 0 ? first : 1;
    const int64_t t = past == 0 ? slots : 1;
    DecodeStepIr step;
    step.spans.push_back({7, past, n, true, {}});
    ASSERT_OK_AND_ASSIGN(DecodeLayout layout, DecodeLayout::Create(step, t, 1));
    ASSERT_OK_AND_ASSIGN(Tensor got, CachedStepAttention(*cache, 0, Rows(q, past, past + n, t),
                                                         Rows(k, past, past + n, t),
                                                         Rows(v, past, past + n, t), layout, 0.3f));
    for (int64_t i = 0; i < n * N * D; ++i) {
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[past * N * D + i], 1e-5)
          << "position " << past + i / (N * D);
    }
    for (int64_t i = n * N * D; i < t * N * D; ++i) ASSERT_EQ(got.data<float>()[i], 0.0f);
    past += n;
  }
}

INSTANTIATE_TEST_SUITE_P(PrefillAndSlots, DecodeKernelsTest,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(3, 4),
                                           std::make_tuple(4, 4), std::make_tuple(5, 8),
                                           std::make_tuple(8, 8), std::make_tuple(12, 16)));

TEST(DecodeKernelsTest, SelectRowsTakesTheSampledRowsOrTheLast) {
  Tensor x = Tensor::Zeros(DType::kFloat32, {1, 4, 2});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(i);
  ASSERT_OK_AND_ASSIGN(Tensor last, SelectRows(x, 1, nullptr));
  EXPECT_EQ(last.data<float>()[0], 6.0f);
  DecodeStepIr step;
  step.spans.push_back({1, 0, 2, true, {}});
  step.spans.push_back({2, 5, 1, false, {}});
  ASSERT_OK_AND_ASSIGN(DecodeLayout layout, DecodeLayout::Create(step, 4, 2));
  ASSERT_OK_AND_ASSIGN(Tensor rows, SelectRows(x, 2, &layout));
  EXPECT_EQ(rows.data<float>()[0], 2.0f);  // slot 1: the first span's last token
  EXPECT_EQ(rows.data<float>()[2], 0.0f);  // a padding row reads slot 0
}

TEST(DecodeKernelsTest, SampleRowsIsGreedyOutsideAStepAndMarksPadding) {
  Tensor logits = Tensor::Zeros(DType::kFloat32, {1, 2, 5});
  logits.data<float>()[3] = 4.0f;
  logits.data<float>()[5 + 1] = 2.0f;
  logits.data<float>()[5 + 4] = 9.0f;  // past vocab_size 4: never sampled
  ASSERT_OK_AND_ASSIGN(Tensor rec, SampleRows(logits, 4, nullptr));
  EXPECT_EQ(rec.data<float>()[0], 3.0f);
  EXPECT_EQ(rec.data<float>()[42], 1.0f);
  DecodeStepIr step;
  step.spans.push_back({1, 0, 1, true, {}});
  step.spans.back().sampling.temperature = 0;
  ASSERT_OK_AND_ASSIGN(DecodeLayout layout, DecodeLayout::Create(step, 2, 2));
  ASSERT_OK_AND_ASSIGN(rec, SampleRows(logits, 4, &layout));
  EXPECT_EQ(rec.data<float>()[0], 3.0f);
  EXPECT_EQ(rec.data<float>()[42], -1.0f);  // padding row
}

// Sampling at T = 1 with logprobs over a row whose padding ids [6, 9) hold
// the largest logits: across 300 positions no padded id is sampled or listed;
// the token's logprob and the top pairs equal a long double log_softmax over
// the 6 real ids (logit desc), and the pairs past the 6 valid ids are id -1.
TEST(DecodeKernelsTest, SampleRowsListsTopLogprobsAndNeverAPaddedId) {
  constexpr int64_t kVocab = 6, kPadded = 9;
  const std::vector<float> row = {0.5f, 2.0f, -1.0f, 1.25f, 0.0f, 1.5f, 50.0f, 40.0f, 60.0f};
  Tensor logits = Tensor::Zeros(DType::kFloat32, {1, 1, kPadded});
  std::copy(row.begin(), row.end(), logits.data<float>());
  long double z = 0;
  for (int64_t i = 0; i < kVocab; ++i) z += std::exp(static_cast<long double>(row[i]));
  const auto logprob = [&](int64_t id) {
    return static_cast<double>(static_cast<long double>(row[id]) - std::log(z));
  };
  const std::vector<int64_t> by_logit = {1, 5, 3, 0, 4, 2};
  std::set<int64_t> sampled;
  for (int64_t past = 0; past < 300; ++past) {
    DecodeStepIr step;
    step.spans.push_back({7, past, 1, true, {}});
    step.spans.back().sampling.seed = 11;
    step.spans.back().sampling.num_logprobs = 8;
    ASSERT_OK_AND_ASSIGN(DecodeLayout layout, DecodeLayout::Create(step, 1, 1));
    ASSERT_OK_AND_ASSIGN(Tensor rec, SampleRows(logits, kVocab, &layout));
    const float* r = rec.data<float>();
    ASSERT_GE(r[0], 0.0f);
    ASSERT_LT(r[0], static_cast<float>(kVocab)) << "position " << past;
    sampled.insert(static_cast<int64_t>(r[0]));
    EXPECT_NEAR(r[1], logprob(static_cast<int64_t>(r[0])), 1e-6);
    for (int64_t i = 0; i < kMaxLogprobs; ++i) {
      if (i < kVocab) {
        EXPECT_EQ(r[2 + 2 * i], static_cast<float>(by_logit[i])) << "pair " << i;
        EXPECT_NEAR(r[3 + 2 * i], logprob(by_logit[i]), 1e-6) << "pair " << i;
      } else {
        EXPECT_EQ(r[2 + 2 * i], -1.0f) << "pair " << i;
        EXPECT_EQ(r[3 + 2 * i], 0.0f) << "pair " << i;
      }
    }
  }
  // softmax gives id 2 (the least likely) ~2.6%: over 300 draws every real
  // id shows up (a sampler stuck on the argmax would not).
  EXPECT_EQ(sampled.size(), static_cast<size_t>(kVocab));
}

}  // namespace
}  // namespace meshserve
