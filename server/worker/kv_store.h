// The worker's KV caches: one KvCache (common/kvcache) per (model,
// placement generation, hosted device), made by the first generation step
// that reaches an attention layer there, with the geometry that step's keys
// have (kv heads held, head_dim) and the model's attention layer count.
//
// Memory: --kv_cache_bytes is this worker's budget per model; a model's
// caches split it evenly over the devices the worker hosts for it (each
// device holds other heads, so each needs its own blocks for every
// sequence). A new generation (scaling, a worker lost) starts with empty
// caches: the coordinator rebuilds sequences' caches by recomputing them
// (re-prefill). The first cache made for a generation drops the model's
// caches of older generations (no step runs on those again; their blocks
// would stay held until the old placement is unloaded, which waits for the
// sequences that started on it to end).
//
// Thread-safety: thread-safe (one mutex over the table; the caches are
// thread-safe themselves and outlive their entries while a step uses them:
// shared_ptr).
#ifndef MESHSERVE_SERVER_WORKER_KV_STORE_H_
#define MESHSERVE_SERVER_WORKER_KV_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/kvcache/kv_cache.h"

namespace meshserve {

class KvCacheStore {
 public:
  // `bytes_per_model` > 0.
  explicit KvCacheStore(int64_t bytes_per_model) : bytes_per_model_(bytes_per_model) {}

  // The cache of (model, generation, device), made with `num_devices`
  // hosted devices sharing the budget; making one drops the model's caches
  // of older generations. \error KvBlockPool::Create's
  //   (kResourceExhausted naming the bytes when a block does not fit), and
  //   kInvalidArgument when an existing cache has another geometry.
  absl::StatusOr<std::shared_ptr<KvCache>> GetOrCreate(const std::string& model,
                                                       int64_t generation, int64_t device,
                                                       int64_t num_devices, int64_t num_layers,
                                                       int64_t kv_heads, int64_t head_dim)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Frees `seqs` in every cache of (model, generation); unknown ones are
  // skipped (a sequence may never have reached this worker's attention).
  void Release(const std::string& model, int64_t generation, const std::vector<int64_t>& seqs)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Gives each of `dsts` a copy of the first `num_tokens` positions of
  // `src`, every layer, in every cache of (model, generation) that holds
  // `src` (the n choices of one prompt share its prefill: the prompt is
  // prefilled once as `src`, then forked). A dst gets its own blocks
  // (ceil(num_tokens / block_tokens)), so later appends never touch src's.
  // Reading src's blocks needs its reservation to cover one position past
  // its length (KvCache::AcquireStep), so src may get one more block early:
  // the one its next token needs. \error kInvalidArgument for num_tokens < 1
  //   or a dst equal to src; kFailedPrecondition when a dst already exists
  //   or src holds fewer than num_tokens positions in some layer;
  //   kResourceExhausted (KvCache::Reserve's) when the blocks are not free.
  //   On error no dst is left behind in that cache.
  absl::Status Fork(const std::string& model, int64_t generation, int64_t src,
                    const std::vector<int64_t>& dsts, int64_t num_tokens)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the caches of (model, generation) (-1: every generation).
  void Drop(const std::string& model, int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  struct Usage {
    int64_t bytes_used = 0;
    int64_t capacity_bytes = 0;
    int64_t sequences = 0;
  };
  Usage GetUsage() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes_per_model() const { return bytes_per_model_; }

 private:
  using Key = std::tuple<std::string, int64_t, int64_t>;  // model, generation, device
  const int64_t bytes_per_model_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<KvCache>> caches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_KV_STORE_H_
