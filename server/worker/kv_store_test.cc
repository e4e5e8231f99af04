// KvCacheStore (kv_store.h): one cache per (model, generation, device) with
// the budget split over the devices; the first cache of a model's new
// generation drops that model's caches of older generations (and only
// those), while a step still holding an old cache keeps using it; Release
// frees sequences in every cache of (model, generation); Fork copies a
// prefix into new sequences' own blocks; Drop; the errors
// (capacity, geometry) name their numbers.
//
// Memory math of the geometry used here (kv_block_pool.h): 2 layers, 1 kv
// head, head_dim 4, 16-token blocks: 2 * 2 * 16 * 1 * 4 * 4 = 1024 bytes a
// block. A budget of 8192 bytes over 2 devices: 4096 bytes, 4 blocks each.
//
// Thread-safety: the concurrency test runs under TSan
// (scripts/sanitizer_tests.sh).
#include "server/worker/kv_store.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kBlockBytes = 1024;
constexpr int64_t kLayers = 2, kKvHeads = 1, kHeadDim = 4;

absl::StatusOr<std::shared_ptr<KvCache>> Get(KvCacheStore& store, const std::string& model,
                                             int64_t generation, int64_t device,
                                             int64_t num_devices = 2) {
  return store.GetOrCreate(model, generation, device, num_devices, kLayers, kKvHeads, kHeadDim);
}

TEST(KvCacheStoreTest, SplitsTheBudgetOverDevicesAndReturnsTheSameCache) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto d0, Get(store, "m", 1, 0));
  ASSERT_OK_AND_ASSIGN(auto d1, Get(store, "m", 1, 1));
  ASSERT_OK_AND_ASSIGN(auto again, Get(store, "m", 1, 0));
  EXPECT_EQ(again.get(), d0.get());
  EXPECT_NE(d1.get(), d0.get());
  EXPECT_EQ(d0->CapacityBytes(), 4 * kBlockBytes);
  EXPECT_EQ(d0->NumFreeBlocks(), 4);
  ASSERT_THAT(d0->Reserve(7, 33), IsOk());  // ceil(33/16) = 3 blocks
  const KvCacheStore::Usage usage = store.GetUsage();
  EXPECT_EQ(usage.sequences, 1);
  EXPECT_EQ(usage.bytes_used, 3 * kBlockBytes);
  EXPECT_EQ(usage.capacity_bytes, 8 * kBlockBytes);
}

TEST(KvCacheStoreTest, NewGenerationDropsOnlyThatModelsOlderCaches) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto m_old0, Get(store, "m", 1, 0));
  ASSERT_OK_AND_ASSIGN(auto m_old1, Get(store, "m", 1, 1));
  ASSERT_OK_AND_ASSIGN(auto other, Get(store, "n", 1, 0));
  ASSERT_THAT(m_old0->Reserve(1, 16), IsOk());   // 1 block
  ASSERT_THAT(m_old1->Reserve(1, 17), IsOk());   // 2 blocks
  ASSERT_THAT(m_old1->Reserve(2, 1), IsOk());    // 1 block
  ASSERT_THAT(other->Reserve(5, 20), IsOk());    // 2 blocks
  KvCacheStore::Usage usage = store.GetUsage();
  EXPECT_EQ(usage.sequences, 4);
  EXPECT_EQ(usage.bytes_used, 6 * kBlockBytes);
  EXPECT_EQ(usage.capacity_bytes, 12 * kBlockBytes);

  ASSERT_OK_AND_ASSIGN(auto m_new, Get(store, "m", 2, 0));
  usage = store.GetUsage();
  // Left: model n's generation-1 cache (1 sequence, 2 blocks) and m's new
  // empty cache; m's generation-1 sequences and bytes are gone.
  EXPECT_EQ(usage.sequences, 1);
  EXPECT_EQ(usage.bytes_used, 2 * kBlockBytes);
  EXPECT_EQ(usage.capacity_bytes, 8 * kBlockBytes);
  EXPECT_EQ(m_new->num_sequences(), 0);
  ASSERT_OK_AND_ASSIGN(auto other_again, Get(store, "n", 1, 0));
  EXPECT_EQ(other_again.get(), other.get());
  EXPECT_THAT(other->SequenceIds(), ElementsAre(5));

  // Asking for generation 1 of m now makes a fresh cache, not the dropped one.
  ASSERT_OK_AND_ASSIGN(auto m_old0_again, Get(store, "m", 1, 0));
  EXPECT_NE(m_old0_again.get(), m_old0.get());
  EXPECT_EQ(m_old0_again->num_sequences(), 0);
}

TEST(KvCacheStoreTest, HeldOldCacheStaysUsableAfterTheDrop) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto old, Get(store, "m", 1, 0));
  ASSERT_THAT(old->Reserve(3, 16), IsOk());
  ASSERT_OK_AND_ASSIGN(auto fresh, Get(store, "m", 2, 0));
  EXPECT_EQ(store.GetUsage().sequences, 0);
  // A step that took the old cache before the drop finishes on it: its
  // blocks are still there, it can grow, write its memory, and free.
  ASSERT_OK_AND_ASSIGN(SequenceKvInfo info, old->Info(3));
  EXPECT_EQ(info.num_blocks, 1);
  ASSERT_THAT(old->Reserve(3, 40), IsOk());
  ASSERT_OK_AND_ASSIGN(info, old->Info(3));
  EXPECT_EQ(info.num_blocks, 3);
  EXPECT_EQ(old->BytesUsed(), 3 * kBlockBytes);
  // The old cache is no longer the store's: Release of generation 1 does not
  // reach it and its bytes do not count in the store's usage.
  store.Release("m", 1, {3});
  EXPECT_EQ(old->num_sequences(), 1);
  EXPECT_EQ(store.GetUsage().bytes_used, 0);
  EXPECT_THAT(old->Free(3), IsOk());
  EXPECT_EQ(old->BytesUsed(), 0);
  EXPECT_EQ(fresh->NumFreeBlocks(), 4);
}

TEST(KvCacheStoreTest, ReleaseFreesTheSequencesInEveryCacheOfTheGeneration) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto d0, Get(store, "m", 1, 0));
  ASSERT_OK_AND_ASSIGN(auto d1, Get(store, "m", 1, 1));
  ASSERT_OK_AND_ASSIGN(auto n0, Get(store, "n", 1, 0));
  for (const auto& cache : {d0, d1, n0}) {
    ASSERT_THAT(cache->Reserve(1, 16), IsOk());
    ASSERT_THAT(cache->Reserve(2, 32), IsOk());
  }
  EXPECT_EQ(store.GetUsage().bytes_used, 9 * kBlockBytes);
  // 99 never reached this worker: skipped. Another generation: no effect.
  store.Release("m", 1, {2, 99});
  store.Release("m", 7, {1});
  EXPECT_THAT(d0->SequenceIds(), ElementsAre(1));
  EXPECT_THAT(d1->SequenceIds(), ElementsAre(1));
  EXPECT_THAT(n0->SequenceIds(), ElementsAre(1, 2));
  const KvCacheStore::Usage usage = store.GetUsage();
  EXPECT_EQ(usage.sequences, 4);
  EXPECT_EQ(usage.bytes_used, 5 * kBlockBytes);
  EXPECT_EQ(d0->NumFreeBlocks(), 3);
  // The freed blocks serve a new sequence: 3 free of 4.
  EXPECT_THAT(d0->Reserve(8, 48), IsOk());
}

// Writes `num_tokens` positions of `seq` in every layer, position p of layer
// l, head h, element e holding 1000 * l + 10 * p + e + (seq * 1e5) (values
// 0.5 more), through the lease CachedAttention uses.
void WritePattern(KvCache& cache, int64_t seq, int64_t num_tokens) {
  ASSERT_THAT(cache.Reserve(seq, num_tokens), IsOk());
  const KvBlockPool& pool = cache.pool();
  const int64_t bt = pool.block_tokens();
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const KvSpan span{seq, 0, 0, num_tokens};
    ASSERT_OK_AND_ASSIGN(KvCache::StepLease lease, cache.AcquireStep(layer, {&span, 1}));
    for (int64_t p = 0; p < num_tokens; ++p) {
      const int32_t block = lease.entries()[0].blocks[p / bt];
      for (int64_t e = 0; e < kHeadDim; ++e) {
        const float v = 1000.0f * layer + 10.0f * p + e + 1e5f * seq;
        pool.KeyData(block, layer)[(p % bt) * kHeadDim + e] = v;
        pool.ValueData(block, layer)[(p % bt) * kHeadDim + e] = v + 0.5f;
      }
    }
    lease.Commit();
  }
}

// Position p of `seq`'s key and value rows in `layer` (its length must be
// below its reservation: the read lease appends nothing).
std::pair<std::vector<float>, std::vector<float>> Row(KvCache& cache, int64_t seq,
                                                      int64_t layer, int64_t p) {
  const SequenceKvInfo info = cache.Info(seq).value();
  const KvSpan span{seq, info.layer_lengths[layer], 0, 1};
  auto lease = cache.AcquireStep(layer, {&span, 1});
  EXPECT_THAT(lease.status(), IsOk());
  if (!lease.ok()) return {};
  const int64_t bt = cache.pool().block_tokens();
  const int32_t block = lease->entries()[0].blocks[p / bt];
  const float* k = cache.pool().KeyData(block, layer) + (p % bt) * kHeadDim;
  const float* v = cache.pool().ValueData(block, layer) + (p % bt) * kHeadDim;
  return {std::vector<float>(k, k + kHeadDim), std::vector<float>(v, v + kHeadDim)};
}

TEST(KvCacheStoreTest, ForkCopiesThePrefixIntoBlocksOfTheirOwn) {
  KvCacheStore store(8 * kBlockBytes);  // one device: 8 blocks
  ASSERT_OK_AND_ASSIGN(auto cache, Get(store, "m", 1, 0, /*num_devices=*/1));
  WritePattern(*cache, 1, 20);  // 2 blocks
  ASSERT_THAT(store.Fork("m", 1, 1, {5, 6}, 18), IsOk());
  for (int64_t dst : {5, 6}) {
    ASSERT_OK_AND_ASSIGN(SequenceKvInfo info, cache->Info(dst));
    EXPECT_THAT(info.layer_lengths, ElementsAre(18, 18));
    EXPECT_EQ(info.num_blocks, 2);
    ASSERT_THAT(cache->Reserve(dst, 19), IsOk());  // room for the read lease
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      for (int64_t p = 0; p < 18; ++p) {
        EXPECT_EQ(Row(*cache, dst, layer, p), Row(*cache, 1, layer, p))
            << "dst " << dst << " layer " << layer << " position " << p;
      }
    }
  }
  // The source is untouched (20 positions) and the copies are separate:
  // rewriting a dst's rows leaves the source's as they were.
  EXPECT_THAT(cache->Info(1)->layer_lengths, ElementsAre(20, 20));
  ASSERT_THAT(cache->Free(5), IsOk());
  WritePattern(*cache, 5, 18);
  EXPECT_EQ(Row(*cache, 1, 1, 3).first,
            (std::vector<float>{1e5f + 1030, 1e5f + 1031, 1e5f + 1032, 1e5f + 1033}));
  EXPECT_EQ(Row(*cache, 5, 1, 3).first[0], 5e5f + 1030);
  EXPECT_EQ(store.GetUsage().sequences, 3);
}

TEST(KvCacheStoreTest, ForkRefusesWhatItCannotCopyAndLeavesNoHalfCopies) {
  KvCacheStore store(8 * kBlockBytes);
  ASSERT_OK_AND_ASSIGN(auto cache, Get(store, "m", 1, 0, /*num_devices=*/1));
  WritePattern(*cache, 1, 20);
  EXPECT_THAT(store.Fork("m", 1, 1, {2}, 21),
              StatusIs(absl::StatusCode::kFailedPrecondition, "layer 0 holds 20"));
  EXPECT_THAT(store.Fork("m", 1, 1, {2}, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store.Fork("m", 1, 1, {1}, 4), StatusIs(absl::StatusCode::kInvalidArgument));
  WritePattern(*cache, 3, 4);
  EXPECT_THAT(store.Fork("m", 1, 1, {3}, 4),
              StatusIs(absl::StatusCode::kFailedPrecondition, "sequence 3 already exists"));
  // 8 blocks: src 2, seq 3 one, so three 2-block copies do not fit: the
  // first two made are freed again.
  EXPECT_THAT(store.Fork("m", 1, 1, {7, 8, 9}, 20),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(cache->SequenceIds(), ElementsAre(1, 3));
  // A source this worker never saw: nothing to copy.
  EXPECT_THAT(store.Fork("m", 1, 42, {43}, 4), IsOk());
  EXPECT_THAT(cache->SequenceIds(), ElementsAre(1, 3));
}

TEST(KvCacheStoreTest, DropOneGenerationOrAll) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto g1, Get(store, "m", 1, 0));
  ASSERT_OK_AND_ASSIGN(auto n1, Get(store, "n", 1, 0));
  ASSERT_THAT(g1->Reserve(1, 1), IsOk());
  ASSERT_THAT(n1->Reserve(1, 1), IsOk());
  store.Drop("m", 5);  // no such generation
  EXPECT_EQ(store.GetUsage().sequences, 2);
  store.Drop("m", 1);
  EXPECT_EQ(store.GetUsage().sequences, 1);
  EXPECT_EQ(store.GetUsage().bytes_used, kBlockBytes);
  store.Drop("n", -1);
  EXPECT_EQ(store.GetUsage().sequences, 0);
  EXPECT_EQ(store.GetUsage().capacity_bytes, 0);
}

TEST(KvCacheStoreTest, CapacityErrorNamesTheBudgetAndTheBlock) {
  // 1500 bytes over 2 devices: 750 a device, below one 1024-byte block.
  KvCacheStore store(1500);
  const absl::Status split = Get(store, "m", 1, 0).status();
  EXPECT_EQ(split.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(split.message()),
              AllOf(HasSubstr("750"), HasSubstr("1024 bytes"), HasSubstr("model 'm'"),
                    HasSubstr("--kv_cache_bytes 1500 over 2 devices")));
  EXPECT_EQ(store.GetUsage().capacity_bytes, 0);
  // On one device the whole 1500 bytes hold one block.
  ASSERT_OK_AND_ASSIGN(auto one, Get(store, "m", 1, 0, /*num_devices=*/1));
  EXPECT_EQ(one->CapacityBytes(), kBlockBytes);
  EXPECT_THAT(one->Reserve(1, 17),
              StatusIs(absl::StatusCode::kResourceExhausted, "2 blocks needed, 1 free"));
}

TEST(KvCacheStoreTest, OtherGeometryIsRefusedNamingBoth) {
  KvCacheStore store(8192);
  ASSERT_OK_AND_ASSIGN(auto cache, Get(store, "m", 1, 0));
  const absl::Status other = store.GetOrCreate("m", 1, 0, 2, kLayers, kKvHeads, 8).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other.message()),
              AllOf(HasSubstr("model 'm' device 0"), HasSubstr("2 layers x 1 heads x 4"),
                    HasSubstr("asked for 2 x 1 x 8")));
  EXPECT_EQ(store.GetUsage().capacity_bytes, cache->CapacityBytes());
}

// Steps keep using generation 1's caches (Reserve/Free, reading usage)
// while another thread moves the model to generation 2 and back through the
// store: no step loses its cache under it (TSan/ASan: no race, no
// use-after-free).
TEST(KvCacheStoreTest, StepsOnAnOldCacheRaceTheNewGeneration) {
  KvCacheStore store(1 << 20);
  constexpr int kThreads = 3, kRounds = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto cache = Get(store, "m", 1, t, kThreads);
        if (!cache.ok()) {  // a newer generation exists: the old one is gone
          ++failures;
          continue;
        }
        const int64_t seq = t * 1000 + r;
        if (!(*cache)->Reserve(seq, 1 + r % 40).ok()) ++failures;
        store.Release("m", 1, {seq});
        (*cache)->Free(seq).IgnoreError();  // Release may have freed it already
        store.GetUsage();
      }
    });
  }
  threads.emplace_back([&] {
    for (int r = 0; r < kRounds; ++r) {
      if (!Get(store, "m", 2 + r, 0, kThreads).ok()) ++failures;
      store.Drop("m", 2 + r);
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace meshserve
