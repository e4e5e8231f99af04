// CachedAttention against NumPy (testdata/attention_reference.py, full causal
// attention over each whole sequence, GQA by repeating kv heads, float64):
// the same tokens are fed to the paged cache step by step (prefill chunks,
// decode steps of one token, several sequences packed in one call, sequences
// joining later, block boundaries crossed, a long prompt prefilled in pieces),
// and every output row must agree within 1e-5 (|got - want| / max(|want|, 1)).
#include "common/kvcache/cached_attention.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "common/kvcache/kv_cache.h"
#include "common/kvcache/testing/attention_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using kv_testing::Driver;
using kv_testing::MaxRelativeError;
using kv_testing::NumpyReference;
using kv_testing::RefSequence;
using kv_testing::ReferenceArgs;
using kv_testing::SequencePlan;

constexpr double kTolerance = 1e-5;

KvBlockPoolOptions PoolOptions(int64_t block_tokens, int64_t layers, int64_t hkv, int64_t d,
                               int64_t num_blocks) {
  return KvBlockPoolOptions{block_tokens, layers, hkv, d, DType::kFloat32,
                            num_blocks * 2 * layers * block_tokens * hkv * d * 4};
}

// NumPy's data for two layers of each of `lengths`' sequences (refs[i] and
// refs[lengths.size() + i]).
absl::StatusOr<std::vector<RefSequence>> TwoLayerReference(int seed, int64_t hq, int64_t hkv,
                                                           int64_t d,
                                                           std::vector<int64_t> lengths,
                                                           float scale = 0.0f) {
  std::vector<int64_t> both = lengths;
  both.insert(both.end(), lengths.begin(), lengths.end());
  return NumpyReference(ReferenceArgs{seed, hq, hkv, d, both, scale});
}

// Plans for refs of 2 * n sequences: sequence i uses refs[i] in layer 0 and
// refs[n + i] in layer 1.
std::vector<SequencePlan> TwoLayerPlans(const std::vector<RefSequence>& refs,
                                        const std::vector<SequencePlan>& shapes) {
  std::vector<SequencePlan> plans = shapes;
  for (size_t i = 0; i < plans.size(); ++i) {
    plans[i].layers = {&refs[i], &refs[plans.size() + i]};
  }
  return plans;
}

void ExpectMatches(const Driver& driver, const std::vector<SequencePlan>& plans) {
  double worst = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    for (size_t l = 0; l < plans[i].layers.size(); ++l) {
      const double err = MaxRelativeError(driver.got(i, l), plans[i].layers[l]->out);
      EXPECT_LE(err, kTolerance) << "sequence " << plans[i].seq_id << " layer " << l;
      worst = std::max(worst, err);
    }
  }
  std::printf("worst relative error vs NumPy: %.3g\n", worst);
}

// Several sequences of different prompt lengths: whole-prompt prefills (sgemm
// path), short prefills (block-loop path), a 40-token prompt in chunks of 7,
// late joiners; decode steps for all. 4-token blocks: boundaries everywhere.
class MixedScheduleTest : public ::testing::TestWithParam<int> {};

TEST_P(MixedScheduleTest, MatchesNumPy) {
  const int threads = GetParam();
  ASSERT_OK_AND_ASSIGN(std::vector<RefSequence> refs,
                       TwoLayerReference(11, 4, 2, 16, {9, 23, 52, 6, 30}));
  //                      seq  prompt chunk start
  const std::vector<SequencePlan> shapes = {{100, 5, 5, 0, {}},
                                            {101, 13, 13, 0, {}},
                                            {102, 40, 7, 1, {}},
                                            {103, 3, 3, 2, {}},
                                            {104, 1, 1, 4, {}}};
  std::vector<SequencePlan> plans = TwoLayerPlans(refs, shapes);
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(PoolOptions(4, 2, 2, 16, 64)));
  CachedAttentionOptions options;
  if (threads > 1) {  // a plain parallel for: item i on thread i % threads
    options.parallel_for = [threads](int64_t n, const std::function<void(int64_t)>& fn) {
      std::vector<std::thread> pool;
      for (int w = 0; w < threads; ++w) {
        pool.emplace_back([&, w] {
          for (int64_t i = w; i < n; i += threads) fn(i);
        });
      }
      for (std::thread& t : pool) t.join();
    };
  }
  Driver driver(cache.get(), plans, options);
  ASSERT_THAT(driver.RunAll(), IsOk());
  EXPECT_GE(driver.max_tokens_per_call(), 18);  // several sequences packed in a call
  ExpectMatches(driver, plans);
  for (const SequencePlan& p : plans) {
    ASSERT_OK_AND_ASSIGN(SequenceKvInfo info, cache->Info(p.seq_id));
    EXPECT_EQ(info.num_tokens, p.layers[0]->length());
    EXPECT_EQ(info.num_blocks, (p.layers[0]->length() + 3) / 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MixedScheduleTest, ::testing::Values(1, 3));

// Pure decode from position 0 with G = 4 (8 query heads over 2 kv heads),
// head_dim 64 and 16-token blocks; and a 70-token prompt in one prefill (more
// than one 64-row query tile) with G = 1, then decode.
TEST(CachedAttentionTest, DecodeOnlyAndLongPrefillMatchNumPy) {
  for (const auto& [hq, hkv, prompt] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {8, 2, 1}, {3, 3, 70}}) {
    ASSERT_OK_AND_ASSIGN(std::vector<RefSequence> refs, TwoLayerReference(5, hq, hkv, 64, {75, 40}));
    const std::vector<SequencePlan> plans =
        TwoLayerPlans(refs, {{1, prompt, prompt, 0, {}}, {2, 1, 1, 3, {}}});
    ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(PoolOptions(16, 2, hkv, 64, 16)));
    Driver driver(cache.get(), plans);
    ASSERT_THAT(driver.RunAll(), IsOk());
    SCOPED_TRACE(::testing::Message() << "hq " << hq << " hkv " << hkv << " prompt " << prompt);
    ExpectMatches(driver, plans);
  }
}

TEST(CachedAttentionTest, ScaleOption) {
  ASSERT_OK_AND_ASSIGN(std::vector<RefSequence> refs, TwoLayerReference(3, 2, 1, 8, {12}, 0.7f));
  const std::vector<SequencePlan> plans = TwoLayerPlans(refs, {{9, 6, 6, 0, {}}});
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(PoolOptions(4, 2, 1, 8, 8)));
  CachedAttentionOptions options;
  options.scale = 0.7f;
  Driver driver(cache.get(), plans, options);
  ASSERT_THAT(driver.RunAll(), IsOk());
  ExpectMatches(driver, plans);
}

// A pool that fits only one sequence at a time: the second runs on the blocks
// the first returned (dirty with its keys) and must still match NumPy.
TEST(CachedAttentionTest, BlocksReusedAfterFreeGiveCorrectResults) {
  ASSERT_OK_AND_ASSIGN(std::vector<RefSequence> refs, TwoLayerReference(8, 4, 4, 8, {20, 18}));
  const std::vector<SequencePlan> plans = TwoLayerPlans(refs, {{1, 9, 4, 0, {}}, {2, 7, 7, 0, {}}});
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(PoolOptions(4, 2, 4, 8, 5)));
  Driver first(cache.get(), {plans[0]});
  ASSERT_THAT(first.RunAll(), IsOk());
  EXPECT_EQ(cache->NumFreeBlocks(), 0);
  EXPECT_THAT(cache->Reserve(2, 1), ::meshserve::testing::StatusIs(
                                        absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(cache->Free(1), IsOk());
  EXPECT_EQ(cache->NumFreeBlocks(), 5);
  const int64_t allocated = cache->pool().BytesAllocated();
  Driver second(cache.get(), {plans[1]});
  ASSERT_THAT(second.RunAll(), IsOk());
  EXPECT_EQ(cache->pool().BytesAllocated(), allocated);  // no fresh memory
  ExpectMatches(first, {plans[0]});
  ExpectMatches(second, {plans[1]});
}

}  // namespace
}  // namespace meshserve
