// The memory of a worker's KV cache, handed out in fixed-size blocks (vLLM's
// PagedAttention): a block holds the keys and values of `block_tokens`
// consecutive token positions of one sequence, for every layer and every kv
// head this worker holds. A sequence owns whole blocks, taken one at a time as
// it grows (see kv_cache.h), never reserved for its maximum length.
//
// Memory math (float32, 4 bytes an element):
//   bytes_per_block = 2 (k and v) * num_layers * block_tokens * num_kv_heads
//                     * head_dim * 4
//   num_blocks      = min(capacity_bytes / bytes_per_block, kMaxBlocks)
//   CapacityBytes() = num_blocks * bytes_per_block       (<= capacity_bytes)
// kMaxBlocks = 2^20 (16M token positions at 16 a block) bounds the block
// table of a tiny model given a large budget; CapacityBytes() is the real size.
// e.g. GPT-2 small on 2 workers (12 layers, 6 kv heads each, head_dim 64,
// 16-token blocks): 589,824 bytes a block, 36,864 bytes a token position.
//
// Layout of one block (float32, row-major):
//   [num_layers][2: key, value][num_kv_heads][block_tokens][head_dim]
// so the keys of one kv head in one block are a contiguous [block_tokens,
// head_dim] matrix (KeyData(block, layer) + head * block_tokens * head_dim):
// a decode step streams each cached row once, and a prefill reads them as
// sgemm operands.
//
// Allocation: block ids are 0 .. num_blocks-1. A block's memory (64-byte
// aligned) is allocated the first time the block is handed out and kept until
// the pool is destroyed, so the process holds at most the peak of blocks in
// use, never more than CapacityBytes(). Allocate prefers recently released
// blocks (warm memory) over fresh ones. Block contents are not cleared: the
// positions a sequence has not written are never read.
//
// Validation: Create checks every option (kInvalidArgument naming the value;
// kResourceExhausted when capacity_bytes holds no whole block). Allocate is
// all-or-nothing (kResourceExhausted naming the blocks asked for and free).
//
// Thread-safety: thread-safe. Allocate/Release and the metrics take an
// internal mutex. KeyData/ValueData take none: a block's memory is set under
// the mutex before its id is first returned by Allocate, and stays put, so
// whoever holds a block id (obtained through a synchronised hand-off) may read
// and write its memory; two threads must not write the same block at once
// (kv_cache.h gives each block to one sequence and each sequence to one
// CachedAttention call at a time).
#ifndef MESHSERVE_COMMON_KVCACHE_KV_BLOCK_POOL_H_
#define MESHSERVE_COMMON_KVCACHE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"

namespace meshserve {

struct KvBlockPoolOptions {
  int64_t block_tokens = 16;    // token positions a block holds, >= 1
  int64_t num_layers = 0;       // >= 1
  int64_t num_kv_heads = 0;     // the kv heads this worker holds, >= 1
  int64_t head_dim = 0;         // >= 1
  DType dtype = DType::kFloat32;  // float32 only
  int64_t capacity_bytes = 0;   // the worker's --kv_cache_bytes
};

class KvBlockPool {
 public:
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;

  // \error kInvalidArgument for a non-positive block_tokens, num_layers,
  //   num_kv_heads or head_dim, a negative capacity_bytes, a dtype other than
  //   float32, or a block size that overflows int64 (each naming the value);
  //   kResourceExhausted when capacity_bytes < bytes_per_block (zero blocks).
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(const KvBlockPoolOptions& options);
  // bytes_per_block of validated options (see file comment).
  static absl::StatusOr<int64_t> BytesPerBlock(const KvBlockPoolOptions& options);

  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // `num_blocks` block ids, all or none.
  // \error kInvalidArgument for num_blocks < 0; kResourceExhausted naming the
  //   blocks asked for and the free ones when fewer are free (nothing taken),
  //   or when the memory of a fresh block cannot be allocated.
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t num_blocks);
  // Returns blocks to the pool. Precondition (DCHECK): each id came from
  // Allocate and is not already free.
  void Release(absl::Span<const int32_t> blocks);

  // The [num_kv_heads][block_tokens][head_dim] keys / values of `layer` in
  // `block`. Precondition (DCHECK): block is allocated, 0 <= layer < num_layers.
  float* KeyData(int32_t block, int64_t layer) const;
  float* ValueData(int32_t block, int64_t layer) const;

  const KvBlockPoolOptions& options() const { return options_; }
  int64_t block_tokens() const { return options_.block_tokens; }
  int64_t bytes_per_block() const { return bytes_per_block_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Blocks needed to hold `num_tokens` >= 0 positions: ceil(num_tokens /
  // block_tokens), without overflow for any int64.
  int64_t BlocksForTokens(int64_t num_tokens) const;

  // Metrics: num_blocks * bytes_per_block; blocks in use * bytes_per_block;
  // bytes of block memory allocated so far (the peak in use).
  int64_t CapacityBytes() const { return num_blocks_ * bytes_per_block_; }
  int64_t BytesUsed() const;
  int64_t BytesAllocated() const;
  int64_t NumFreeBlocks() const;

  // "kv_pool[blocks=10 x 16 tokens, 589824 bytes each, used=3]".
  std::string ToString() const;

 private:
  KvBlockPool(const KvBlockPoolOptions& options, int64_t bytes_per_block, int64_t num_blocks);

  const KvBlockPoolOptions options_;
  const int64_t bytes_per_block_;
  const int64_t num_blocks_;
  const int64_t layer_stride_;  // floats of one layer's keys and values in a block
  const int64_t kv_stride_;     // floats of one layer's keys (or values)

  mutable absl::Mutex mu_;
  // Released blocks, reused last-in first-out.
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
  // Blocks never handed out yet are next_fresh_ .. num_blocks_-1.
  int32_t next_fresh_ ABSL_GUARDED_BY(mu_) = 0;
  // Block i's memory, null until first allocated; element i is written once,
  // under mu_, before id i is first returned (see Thread-safety), so it is
  // read without the mutex by block holders.
  std::vector<float*> memory_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_KVCACHE_KV_BLOCK_POOL_H_
