// KvBlockPool and KvCache: option validation, the memory math, Reserve's
// all-or-nothing growth, Free, Truncate, leases, and the errors of bad spans
// and bad shapes given to CachedAttention.
#include "common/kvcache/kv_cache.h"

#include <memory>
#include <vector>

#include "common/kvcache/cached_attention.h"
#include "common/kvcache/kv_block_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 2 layers, 2 kv heads, head_dim 4, 4-token blocks: 2*2*4*2*4*4 = 512 bytes a block.
KvBlockPoolOptions SmallOptions(int64_t num_blocks) {
  // The 100 bytes beyond whole blocks are no block.
  return KvBlockPoolOptions{4, 2, 2, 4, DType::kFloat32, num_blocks * 512 + 100};
}

TEST(KvBlockPoolTest, MemoryMath) {
  ASSERT_OK_AND_ASSIGN(auto pool, KvBlockPool::Create(SmallOptions(10)));
  EXPECT_EQ(pool->bytes_per_block(), 512);
  EXPECT_EQ(pool->num_blocks(), 10);
  EXPECT_EQ(pool->CapacityBytes(), 5120);
  EXPECT_EQ(pool->BytesUsed(), 0);
  EXPECT_EQ(pool->BlocksForTokens(0), 0);
  EXPECT_EQ(pool->BlocksForTokens(4), 1);
  EXPECT_EQ(pool->BlocksForTokens(5), 2);
  // GPT-2 small on 2 workers: 12 layers, 6 kv heads, head_dim 64, 16 tokens.
  KvBlockPoolOptions gpt2{16, 12, 6, 64, DType::kFloat32, int64_t{1} << 30};
  EXPECT_THAT(KvBlockPool::BytesPerBlock(gpt2), ::meshserve::testing::IsOkAndHolds(589824));
  ASSERT_OK_AND_ASSIGN(auto big, KvBlockPool::Create(gpt2));
  EXPECT_EQ(big->num_blocks(), (int64_t{1} << 30) / 589824);
  EXPECT_EQ(big->BytesAllocated(), 0);  // memory comes with the first use of a block
  EXPECT_EQ(big->BlocksForTokens(INT64_MAX), INT64_MAX / 16 + 1);
  // A tiny block and a huge budget: the block count is clamped.
  ASSERT_OK_AND_ASSIGN(auto tiny, KvBlockPool::Create({16, 1, 1, 1, DType::kFloat32,
                                                       int64_t{1} << 40}));
  EXPECT_EQ(tiny->num_blocks(), KvBlockPool::kMaxBlocks);
  EXPECT_EQ(tiny->CapacityBytes(), KvBlockPool::kMaxBlocks * 128);
}

TEST(KvBlockPoolTest, CreateRejectsBadOptions) {
  struct Case {
    void (*mutate)(KvBlockPoolOptions*);
    absl::StatusCode code;
    const char* substr;
  };
  const Case cases[] = {
      {[](KvBlockPoolOptions* o) { o->block_tokens = 0; }, absl::StatusCode::kInvalidArgument,
       "block_tokens 0"},
      {[](KvBlockPoolOptions* o) { o->num_layers = -1; }, absl::StatusCode::kInvalidArgument,
       "num_layers -1"},
      {[](KvBlockPoolOptions* o) { o->num_kv_heads = 0; }, absl::StatusCode::kInvalidArgument,
       "num_kv_heads 0"},
      {[](KvBlockPoolOptions* o) { o->head_dim = 0; }, absl::StatusCode::kInvalidArgument,
       "head_dim 0"},
      {[](KvBlockPoolOptions* o) { o->dtype = DType::kBFloat16; },
       absl::StatusCode::kInvalidArgument, "bfloat16"},
      {[](KvBlockPoolOptions* o) { o->capacity_bytes = -5; }, absl::StatusCode::kInvalidArgument,
       "capacity_bytes -5"},
      {[](KvBlockPoolOptions* o) { o->head_dim = int64_t{1} << 40; },
       absl::StatusCode::kInvalidArgument, "too large"},
      {[](KvBlockPoolOptions* o) { o->capacity_bytes = 511; },
       absl::StatusCode::kResourceExhausted, "capacity_bytes 511 holds no block of 512 bytes"},
  };
  for (const Case& c : cases) {
    KvBlockPoolOptions o = SmallOptions(4);
    c.mutate(&o);
    EXPECT_THAT(KvBlockPool::Create(o), StatusIs(c.code, c.substr));
  }
}

TEST(KvBlockPoolTest, AllocateIsAllOrNothingAndReusesReleasedBlocks) {
  ASSERT_OK_AND_ASSIGN(auto pool, KvBlockPool::Create(SmallOptions(3)));
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> a, pool->Allocate(2));
  EXPECT_THAT(a, ElementsAre(0, 1));
  EXPECT_THAT(pool->Allocate(2), StatusIs(absl::StatusCode::kResourceExhausted,
                                          "2 blocks needed, 1 free"));
  EXPECT_EQ(pool->NumFreeBlocks(), 1);
  EXPECT_THAT(pool->Allocate(-1), StatusIs(absl::StatusCode::kInvalidArgument));
  pool->Release({a[1]});
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> b, pool->Allocate(2));
  EXPECT_THAT(b, ElementsAre(1, 2));  // the released block first
  EXPECT_EQ(pool->BytesUsed(), 3 * 512);
  EXPECT_EQ(pool->BytesAllocated(), 3 * 512);
  // Layout: layer 1's keys follow layer 0's keys and values; values follow keys.
  EXPECT_EQ(pool->ValueData(0, 0) - pool->KeyData(0, 0), 2 * 4 * 4);
  EXPECT_EQ(pool->KeyData(0, 1) - pool->KeyData(0, 0), 2 * 2 * 4 * 4);
}

TEST(KvCacheTest, ReserveGrowsByWholeBlocksAllOrNothing) {
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(SmallOptions(5)));
  ASSERT_THAT(cache->Reserve(7, 5), IsOk());  // 2 blocks
  ASSERT_OK_AND_ASSIGN(SequenceKvInfo info, cache->Info(7));
  EXPECT_EQ(info.num_blocks, 2);
  EXPECT_EQ(info.reserved_tokens, 8);
  EXPECT_EQ(info.num_tokens, 0);
  ASSERT_THAT(cache->Reserve(7, 8), IsOk());  // still 2 blocks
  ASSERT_THAT(cache->Reserve(7, 3), IsOk());  // never shrinks
  EXPECT_EQ(cache->Info(7)->num_blocks, 2);
  ASSERT_THAT(cache->Reserve(8, 9), IsOk());  // 3 blocks: the pool is full
  EXPECT_EQ(cache->NumFreeBlocks(), 0);
  EXPECT_EQ(cache->BytesUsed(), cache->CapacityBytes());
  // Sequence 7 to 9 tokens needs one more block; none is free; nothing changes.
  absl::Status full = cache->Reserve(7, 9);
  EXPECT_THAT(full, StatusIs(absl::StatusCode::kResourceExhausted, "sequence 7 to 9 tokens"));
  EXPECT_THAT(full.message(), HasSubstr("1 blocks needed, 0 free"));
  EXPECT_EQ(cache->Info(7)->num_blocks, 2);
  // A new sequence that does not fit is not created.
  EXPECT_THAT(cache->Reserve(9, 1), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(cache->Info(9), StatusIs(absl::StatusCode::kNotFound, "unknown sequence 9"));
  EXPECT_THAT(cache->SequenceIds(), ElementsAre(7, 8));
  EXPECT_THAT(cache->Reserve(7, -1), StatusIs(absl::StatusCode::kInvalidArgument, "-1"));
  EXPECT_THAT(cache->Reserve(7, INT64_MAX), StatusIs(absl::StatusCode::kResourceExhausted,
                                                     "2305843009213693952 needed"));
  EXPECT_EQ(cache->Info(7)->num_blocks, 2);
  // Free returns the blocks at once.
  ASSERT_THAT(cache->Free(8), IsOk());
  EXPECT_EQ(cache->NumFreeBlocks(), 3);
  EXPECT_THAT(cache->Reserve(7, 9), IsOk());
  EXPECT_THAT(cache->Free(8), StatusIs(absl::StatusCode::kNotFound, "unknown sequence 8"));
  EXPECT_EQ(cache->num_sequences(), 1);
}

// Appends `n` tokens of zeros to sequence `seq` in `layer` (past_len p).
absl::Status Append(KvCache& cache, int64_t layer, int64_t seq, int64_t p, int64_t n) {
  Tensor q = Tensor::Zeros(DType::kFloat32, {n, 2, 4});
  Tensor kv = Tensor::Zeros(DType::kFloat32, {n, 2, 4});
  KvSpan span{seq, p, 0, n};
  return CachedAttention(cache, layer, q, kv, kv, {&span, 1}).status();
}

TEST(KvCacheTest, LengthsPerLayerAndTruncate) {
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(SmallOptions(5)));
  ASSERT_THAT(cache->Reserve(1, 10), IsOk());
  ASSERT_THAT(Append(*cache, 0, 1, 0, 6), IsOk());
  ASSERT_OK_AND_ASSIGN(SequenceKvInfo info, cache->Info(1));
  EXPECT_THAT(info.layer_lengths, ElementsAre(6, 0));
  EXPECT_EQ(info.num_tokens, 0);
  ASSERT_THAT(Append(*cache, 1, 1, 0, 6), IsOk());
  EXPECT_EQ(cache->Info(1)->num_tokens, 6);
  // A retry of the next step after layer 0 only: truncate, then redo.
  ASSERT_THAT(Append(*cache, 0, 1, 6, 2), IsOk());
  EXPECT_THAT(Append(*cache, 0, 1, 6, 2),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "past_len 6 but sequence 1 has 8 tokens cached in layer 0"));
  ASSERT_THAT(cache->Truncate(1, 6), IsOk());
  EXPECT_THAT(cache->Info(1)->layer_lengths, ElementsAre(6, 6));
  EXPECT_THAT(Append(*cache, 0, 1, 6, 2), IsOk());
  EXPECT_THAT(cache->Truncate(1, 13), StatusIs(absl::StatusCode::kOutOfRange, "13"));
  EXPECT_THAT(cache->Truncate(1, -1), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(cache->Truncate(2, 0), StatusIs(absl::StatusCode::kNotFound));
}

TEST(KvCacheTest, HeldSequences) {
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(SmallOptions(5)));
  ASSERT_THAT(cache->Reserve(1, 4), IsOk());
  ASSERT_THAT(cache->Reserve(2, 4), IsOk());
  const KvSpan one{1, 0, 0, 2};
  {
    ASSERT_OK_AND_ASSIGN(KvCache::StepLease lease, cache->AcquireStep(0, {&one, 1}));
    ASSERT_EQ(lease.entries().size(), 1u);
    EXPECT_EQ(lease.entries()[0].blocks.size(), 1u);
    EXPECT_THAT(cache->AcquireStep(0, {&one, 1}),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         "sequence 1 is held by another CachedAttention call"));
    EXPECT_THAT(cache->Truncate(1, 0), StatusIs(absl::StatusCode::kFailedPrecondition));
    // Free while held: gone at once, the blocks come back when the lease ends.
    ASSERT_THAT(cache->Free(1), IsOk());
    EXPECT_THAT(cache->Info(1), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_EQ(cache->NumFreeBlocks(), 3);
    lease.Commit();
  }
  EXPECT_EQ(cache->NumFreeBlocks(), 4);
  // A lease without Commit leaves the lengths unchanged and is released.
  const KvSpan two{2, 0, 0, 3};
  {
    ASSERT_OK_AND_ASSIGN(KvCache::StepLease lease, cache->AcquireStep(1, {&two, 1}));
  }
  EXPECT_THAT(cache->Info(2)->layer_lengths, ElementsAre(0, 0));
  // An error on a later span releases the earlier ones.
  const KvSpan both[] = {{2, 0, 0, 3}, {3, 0, 3, 1}};
  EXPECT_THAT(cache->AcquireStep(0, both),
              StatusIs(absl::StatusCode::kNotFound, "span 1: sequence 3 has no cache"));
  EXPECT_THAT(cache->AcquireStep(0, {&two, 1}), IsOk());
}

TEST(CachedAttentionTest, BadSpansAreErrors) {
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(SmallOptions(5)));
  ASSERT_THAT(cache->Reserve(1, 4), IsOk());
  ASSERT_THAT(cache->Reserve(2, 4), IsOk());
  Tensor q = Tensor::Zeros(DType::kFloat32, {3, 2, 4});
  Tensor kv = Tensor::Zeros(DType::kFloat32, {3, 2, 4});
  struct Case {
    std::vector<KvSpan> spans;
    int64_t layer;
    absl::StatusCode code;
    const char* substr;
  };
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  const absl::StatusCode kPrecondition = absl::StatusCode::kFailedPrecondition;
  const Case cases[] = {
      {{{1, 0, 0, 2}}, 0, kInvalid, "spans cover 2 tokens but q has 3"},
      {{{1, 0, 0, 2}, {2, 0, 1, 1}}, 0, kInvalid, "span 1 (sequence 2) begins at token 1, expected 2"},
      {{{1, 0, 0, 4}}, 0, kInvalid, "span 0 (sequence 1) has num_tokens 4: must be in [1, 3]"},
      {{{1, 0, 0, 0}, {2, 0, 0, 3}}, 0, kInvalid, "num_tokens 0"},
      {{{1, 0, 0, 2}, {1, 2, 2, 1}}, 0, kInvalid, "sequence 1 is in two spans"},
      {{{1, 0, 0, 2}, {5, 0, 2, 1}}, 0, absl::StatusCode::kNotFound,
       "span 1: sequence 5 has no cache (Reserve it first)"},
      {{{1, 1, 0, 3}}, 0, kPrecondition, "past_len 1 but sequence 1 has 0 tokens cached"},
      {{{1, -1, 0, 3}}, 0, kInvalid, "past_len -1"},
      {{{1, 0, 0, 1}, {2, 0, 1, 2}}, 2, absl::StatusCode::kOutOfRange, "layer 2 is outside [0, 2)"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(CachedAttention(*cache, c.layer, q, kv, kv, c.spans), StatusIs(c.code, c.substr));
  }
  // Reserved too short: 5 tokens in a sequence reserved for 4.
  ASSERT_THAT(Append(*cache, 0, 1, 0, 3), IsOk());
  EXPECT_THAT(Append(*cache, 0, 1, 3, 2),
              StatusIs(kPrecondition, "sequence 1 needs 5 tokens (past_len 3 + num_tokens 2) "
                                      "but has 4 reserved"));
  // Nothing was appended by any failed call.
  EXPECT_THAT(cache->Info(1)->layer_lengths, ElementsAre(3, 0));
  EXPECT_THAT(cache->Info(2)->layer_lengths, ElementsAre(0, 0));
}

TEST(CachedAttentionTest, BadShapesAreErrors) {
  ASSERT_OK_AND_ASSIGN(auto cache, KvCache::Create(SmallOptions(5)));
  ASSERT_THAT(cache->Reserve(1, 4), IsOk());
  const KvSpan span{1, 0, 0, 2};
  Tensor kv = Tensor::Zeros(DType::kFloat32, {2, 2, 4});
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(CachedAttention(*cache, 0, Tensor::Zeros(DType::kFloat32, {2, 3, 4}), kv, kv,
                              {&span, 1}),
              StatusIs(kInvalid, "3 query heads are not a multiple of 2 kv heads"));
  EXPECT_THAT(CachedAttention(*cache, 0, Tensor::Zeros(DType::kFloat32, {2, 2, 5}), kv, kv,
                              {&span, 1}),
              StatusIs(kInvalid, "must be [N, Hq, 4] and [N, 2, 4]"));
  EXPECT_THAT(CachedAttention(*cache, 0, Tensor::Zeros(DType::kFloat32, {2, 4, 4}),
                              Tensor::Zeros(DType::kFloat32, {2, 1, 4}), kv, {&span, 1}),
              StatusIs(kInvalid, "k_new f32[2, 1, 4]"));
  EXPECT_THAT(CachedAttention(*cache, 0, Tensor::Zeros(DType::kBFloat16, {2, 2, 4}), kv, kv,
                              {&span, 1}),
              StatusIs(kInvalid, "must be float32 of rank 3"));
  CachedAttentionOptions bad_scale;
  bad_scale.scale = -1.0f;
  EXPECT_THAT(CachedAttention(*cache, 0, Tensor::Zeros(DType::kFloat32, {2, 2, 4}), kv, kv,
                              {&span, 1}, bad_scale),
              StatusIs(kInvalid, "scale -1"));
  Tensor wrong_out = Tensor::Zeros(DType::kFloat32, {2, 2, 3});
  EXPECT_THAT(CachedAttentionInto(*cache, 0, Tensor::Zeros(DType::kFloat32, {2, 2, 4}), kv, kv,
                                  {&span, 1}, {}, &wrong_out),
              StatusIs(kInvalid, "out f32[2, 2, 3]"));
  Tensor q = Tensor::Zeros(DType::kFloat32, {2, 2, 4});
  EXPECT_THAT(CachedAttentionInto(*cache, 0, q, kv, kv, {&span, 1}, {}, &q),
              StatusIs(kInvalid, "must not share its buffer"));
  EXPECT_THAT(cache->Info(1)->layer_lengths, ElementsAre(0, 0));
}

}  // namespace
}  // namespace meshserve
