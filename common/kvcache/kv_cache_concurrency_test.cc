// The KV cache under threads (run under TSan by scripts/sanitizer_tests.sh):
// several threads each reserve, prefill, decode and free their own sequences
// in one shared cache, through CachedAttention, while another thread reads the
// metrics; every output is checked against a naive float64 reference. Also:
// Free racing a running call on the same sequence.
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/kvcache/cached_attention.h"
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
using kv_testing::NaiveReference;
using kv_testing::RefSequence;
using kv_testing::SequencePlan;

constexpr int64_t kHq = 4, kHkv = 2, kD = 16, kBlockTokens = 4;

std::unique_ptr<KvCache> MakeCache(int64_t num_blocks) {
  auto cache = KvCache::Create(KvBlockPoolOptions{kBlockTokens, 1, kHkv, kD, DType::kFloat32,
                                                   num_blocks * 2 * kBlockTokens * kHkv * kD * 4});
  MS_CHECK(cache.ok()) << cache.status();
  return *std::move(cache);
}

class KvCacheConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheConcurrencyTest, ThreadsRunTheirOwnSequences) {
  const int num_threads = GetParam();
  constexpr int kRounds = 8;
  // Per thread and round: two sequences (lengths 21 and 13), prompts 9 and 2.
  std::vector<std::vector<RefSequence>> refs(num_threads);
  for (int t = 0; t < num_threads; ++t) {
    for (int r = 0; r < kRounds; ++r) {
      refs[t].push_back(NaiveReference(1000 * t + 2 * r, 21, kHq, kHkv, kD));
      refs[t].push_back(NaiveReference(1000 * t + 2 * r + 1, 13, kHq, kHkv, kD));
    }
  }
  // A thread holds at most 10 blocks at once (6 + 4); the threads' rounds
  // reuse each other's freed blocks.
  std::unique_ptr<KvCache> cache = MakeCache(10 * num_threads);
  std::atomic<int> ready{0};  // the threads start together
  std::atomic<bool> stop{false};
  std::thread metrics([&] {
    while (!stop.load()) {
      EXPECT_LE(cache->BytesUsed(), cache->CapacityBytes());
      cache->SequenceIds();
      std::this_thread::yield();
    }
  });
  std::vector<double> worst(num_threads, 0.0);
  std::vector<int> failures(num_threads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < num_threads) std::this_thread::yield();
      for (int r = 0; r < kRounds; ++r) {
        const int64_t a = 100 * t + 2 * r, b = a + 1;
        std::vector<SequencePlan> plans = {{a, 9, 5, 0, {&refs[t][2 * r]}},
                                           {b, 2, 2, 1, {&refs[t][2 * r + 1]}}};
        Driver driver(cache.get(), plans);
        const absl::Status status = driver.RunAll();
        if (!status.ok()) {
          ADD_FAILURE() << status;
          ++failures[t];
        }
        for (size_t i = 0; i < plans.size(); ++i) {
          worst[t] = std::max(worst[t], MaxRelativeError(driver.got(i, 0), plans[i].layers[0]->out));
        }
        EXPECT_THAT(cache->Free(a), IsOk());
        EXPECT_THAT(cache->Free(b), IsOk());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  stop = true;
  metrics.join();
  for (int t = 0; t < num_threads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_LE(worst[t], 1e-5) << "thread " << t;
  }
  EXPECT_EQ(cache->num_sequences(), 0);
  EXPECT_EQ(cache->BytesUsed(), 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, KvCacheConcurrencyTest, ::testing::Values(2, 4));

// One thread decodes a sequence while another frees it: each call either runs
// (the blocks come back when it ends) or finds the sequence gone; in the end
// every block is free.
TEST(KvCacheConcurrencyTest, FreeRacesARunningCall) {
  std::unique_ptr<KvCache> cache = MakeCache(64);
  const RefSequence ref = NaiveReference(7, 40, kHq, kHkv, kD);
  for (int round = 0; round < 20; ++round) {
    const int64_t seq = round;
    ASSERT_THAT(cache->Reserve(seq, 40), IsOk());
    std::atomic<bool> started{false};
    std::thread decoder([&] {
      for (int64_t p = 0; p < 40; ++p) {
        Tensor q = Tensor::Zeros(DType::kFloat32, {1, kHq, kD});
        Tensor k = Tensor::Zeros(DType::kFloat32, {1, kHkv, kD});
        const KvSpan span{seq, p, 0, 1};
        absl::StatusOr<Tensor> out = CachedAttention(*cache, 0, q, k, k, {&span, 1});
        started = true;
        if (!out.ok()) {
          EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound) << out.status();
          return;
        }
      }
    });
    while (!started.load()) std::this_thread::yield();
    EXPECT_THAT(cache->Free(seq), IsOk());
    decoder.join();
    EXPECT_EQ(cache->NumFreeBlocks(), 64);
  }
}

}  // namespace
}  // namespace meshserve
