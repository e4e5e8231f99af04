// A worker's KV cache: a KvBlockPool (kv_block_pool.h) and, per sequence id,
// its block table and how many token positions it has cached.
//
//   ASSIGN_OR_RETURN(auto cache, KvCache::Create(pool_options));
//   RETURN_IF_ERROR(cache->Reserve(seq, past_len + num_new));  // whole blocks
//   ... CachedAttention(*cache, layer, q, k, v, spans) for every layer ...
//   RETURN_IF_ERROR(cache->Free(seq));                        // at the end
//
// Block table: position p of sequence s lives in block table[p / block_tokens]
// at row p % block_tokens. Reserve(s, n) grows the table to
// ceil(n / block_tokens) blocks; it never shrinks (blocks go back only at Free).
//
// Lengths: each layer of a sequence has its own cached length, advanced by a
// CachedAttention call of that layer (past_len -> past_len + num_tokens); a
// call must append at exactly the layer's length (past_len == length, so no
// gap and no overwrite). Info().num_tokens is the smallest of the layers'
// lengths (the positions every layer holds). Truncate(s, n) cuts every layer
// back to at most n (a step retried after a failure midway through the
// layers), keeping the blocks.
//
// A call of CachedAttention holds its sequences for its duration (StepLease):
// a sequence is in at most one call at a time (another is refused with
// kFailedPrecondition), Truncate of a held sequence is refused, and Free of a
// held sequence removes it at once and returns its blocks when the call ends.
//
// Thread-safety: thread-safe. One absl::Mutex guards the sequence table; the
// pool has its own (taken inside it). Attention over different sequences runs
// concurrently: the lease copies the block tables it needs under the mutex and
// the kernel reads and writes block memory without it (each block belongs to
// one sequence, each sequence to one call at a time).
#ifndef MESHSERVE_COMMON_KVCACHE_KV_CACHE_H_
#define MESHSERVE_COMMON_KVCACHE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/kvcache/kv_block_pool.h"

namespace meshserve {

// The tokens of one sequence in a batch packed as tokens: rows token_begin ..
// token_begin + num_tokens - 1 of the batch sit at positions past_len ..
// past_len + num_tokens - 1 of sequence seq_id.
struct KvSpan {
  int64_t seq_id = 0;
  int64_t past_len = 0;
  int64_t token_begin = 0;
  int64_t num_tokens = 0;
};

struct SequenceKvInfo {
  int64_t num_tokens = 0;       // positions cached in every layer
  int64_t reserved_tokens = 0;  // num_blocks * block_tokens
  int64_t num_blocks = 0;
  std::vector<int64_t> layer_lengths;  // positions cached, per layer
};

class KvCache {
  struct Sequence;

 public:
  // \error as KvBlockPool::Create.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvBlockPoolOptions& options);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Makes sequence `seq` (created if new) hold blocks for at least
  // `num_tokens` positions, all or nothing.
  // \error kInvalidArgument for num_tokens < 0; kResourceExhausted naming the
  //   sequence, the tokens, the blocks needed and the blocks free, with
  //   nothing changed (a new sequence is not created).
  absl::Status Reserve(int64_t seq, int64_t num_tokens);
  // Removes `seq` and returns its blocks (at the end of the CachedAttention
  // call holding it, if one does). \error kNotFound for an unknown sequence.
  absl::Status Free(int64_t seq);
  // Cuts every layer's length back to at most `num_tokens` (blocks kept).
  // \error kNotFound for an unknown sequence; kOutOfRange for num_tokens < 0
  //   or above the sequence's reserved tokens; kFailedPrecondition while a
  //   CachedAttention call holds it.
  absl::Status Truncate(int64_t seq, int64_t num_tokens);
  // \error kNotFound for an unknown sequence.
  absl::StatusOr<SequenceKvInfo> Info(int64_t seq) const;
  std::vector<int64_t> SequenceIds() const;  // sorted
  int64_t num_sequences() const;

  const KvBlockPool& pool() const { return *pool_; }
  // Metrics (see KvBlockPool).
  int64_t BytesUsed() const { return pool_->BytesUsed(); }
  int64_t CapacityBytes() const { return pool_->CapacityBytes(); }
  int64_t NumFreeBlocks() const { return pool_->NumFreeBlocks(); }

  // One CachedAttention call's hold on its sequences (see file comment).
  // Move-only; the destructor releases the sequences, advancing their
  // lengths in `layer` only if Commit() was called.
  class StepLease {
   public:
    struct Entry {
      KvSpan span;
      std::vector<int32_t> blocks;  // the first ceil((past_len + num_tokens) / block_tokens)
    };
    StepLease(StepLease&& other) noexcept;
    StepLease& operator=(StepLease&&) = delete;
    StepLease(const StepLease&) = delete;
    ~StepLease();

    int64_t layer() const { return layer_; }
    const std::vector<Entry>& entries() const { return entries_; }
    void Commit() { committed_ = true; }

   private:
    friend class KvCache;
    StepLease(KvCache* cache, int64_t layer) : cache_(cache), layer_(layer) {}
    KvCache* cache_;
    int64_t layer_;
    bool committed_ = false;
    std::vector<Entry> entries_;
    std::vector<std::shared_ptr<Sequence>> held_;
  };

  // Holds the spans' sequences for a call appending in `layer`.
  // \error kOutOfRange for a layer outside [0, num_layers); kInvalidArgument
  //   for a span with num_tokens < 1 or past_len < 0, or a sequence in two
  //   spans; kNotFound for a sequence never reserved; kFailedPrecondition when
  //   past_len differs from the layer's cached length, the reservation is
  //   shorter than past_len + num_tokens, or another call holds the sequence.
  //   Each names the span index and the values. Nothing is held on error.
  absl::StatusOr<StepLease> AcquireStep(int64_t layer, absl::Span<const KvSpan> spans);

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    std::vector<int64_t> layer_lengths;
    bool held = false;   // by a StepLease
    bool freed = false;  // Free()d while held: blocks go back at release
  };

  explicit KvCache(std::unique_ptr<KvBlockPool> pool) : pool_(std::move(pool)) {}
  absl::Status CheckSpan(int64_t index, int64_t layer, const KvSpan& span,
                         const Sequence* s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseStep(StepLease* lease) ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<KvBlockPool> pool_;
  mutable absl::Mutex mu_;
  // Sequence state is read and written only under mu_ (shared_ptr so a held
  // sequence outlives its Free until the lease ends).
  absl::flat_hash_map<int64_t, std::shared_ptr<Sequence>> sequences_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_KVCACHE_KV_CACHE_H_
