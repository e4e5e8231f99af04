// KvCacheStore (kv_store.h).
#include "server/worker/kv_store.h"

#include <algorithm>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::StatusOr<std::shared_ptr<KvCache>> KvCacheStore::GetOrCreate(
    const std::string& model, int64_t generation, int64_t device, int64_t num_devices,
    int64_t num_layers, int64_t kv_heads, int64_t head_dim) {
  absl::MutexLock lock(&mu_);
  const Key key{model, generation, device};
  auto it = caches_.find(key);
  if (it != caches_.end()) {
    const KvBlockPoolOptions& o = it->second->pool().options();
    if (o.num_layers != num_layers || o.num_kv_heads != kv_heads || o.head_dim != head_dim) {
      return InvalidArgument("model '", model, "' device ", device, ": a KV cache of ",
                             o.num_layers, " layers x ", o.num_kv_heads, " heads x ", o.head_dim,
                             " exists; a step asked for ", num_layers, " x ", kv_heads, " x ",
                             head_dim);
    }
    return it->second;
  }
  KvBlockPoolOptions options;
  options.num_layers = num_layers;
  options.num_kv_heads = kv_heads;
  options.head_dim = head_dim;
  options.capacity_bytes = bytes_per_model_ / std::max<int64_t>(num_devices, 1);
  MS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, KvCache::Create(options),
                      "model '", model, "' device ", device, " (--kv_cache_bytes ",
                      bytes_per_model_, " over ", num_devices, " devices)");
  std::shared_ptr<KvCache> shared = std::move(cache);
  // The coordinator runs a model's steps on its newest placement only: the
  // caches of older generations (sequences rebuilt on this one) are dead
  // weight. A step still using one holds it until it ends.
  for (auto old = caches_.begin(); old != caches_.end();) {
    const bool older = std::get<0>(old->first) == model && std::get<1>(old->first) < generation;
    old = older ? caches_.erase(old) : std::next(old);
  }
  caches_.emplace(key, shared);
  return shared;
}

void KvCacheStore::Release(const std::string& model, int64_t generation,
                           const std::vector<int64_t>& seqs) {
  std::vector<std::shared_ptr<KvCache>> caches;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, cache] : caches_) {
      if (std::get<0>(key) == model && std::get<1>(key) == generation) caches.push_back(cache);
    }
  }
  for (const std::shared_ptr<KvCache>& cache : caches) {
    for (int64_t seq : seqs) cache->Free(seq).IgnoreError();  // unknown: nothing to free
  }
}

namespace {

// Copies src's first num_tokens positions of every layer into dst (new).
absl::Status ForkOne(KvCache& cache, int64_t src, int64_t dst, int64_t num_tokens) {
  if (cache.Info(dst).ok()) {
    return FailedPrecondition("fork of sequence ", src, ": sequence ", dst, " already exists");
  }
  MS_ASSIGN_OR_RETURN(SequenceKvInfo info, cache.Info(src));
  for (size_t layer = 0; layer < info.layer_lengths.size(); ++layer) {
    if (info.layer_lengths[layer] < num_tokens) {
      return FailedPrecondition("fork of sequence ", src, " at ", num_tokens,
                                " positions: layer ", layer, " holds ",
                                info.layer_lengths[layer]);
    }
  }
  const KvBlockPool& pool = cache.pool();
  const KvBlockPoolOptions& o = pool.options();
  const int64_t floats = o.num_kv_heads * pool.block_tokens() * o.head_dim;
  const int64_t blocks = pool.BlocksForTokens(num_tokens);
  int64_t src_reserve = 0;
  for (int64_t len : info.layer_lengths) src_reserve = std::max(src_reserve, len + 1);
  MS_RETURN_IF_ERROR(cache.Reserve(src, src_reserve));
  MS_RETURN_IF_ERROR(cache.Reserve(dst, num_tokens));
  for (int64_t layer = 0; layer < static_cast<int64_t>(info.layer_lengths.size()); ++layer) {
    // A lease on src reads its block table without advancing it (no Commit);
    // the one on dst advances dst's length to num_tokens (Commit).
    const KvSpan from{src, info.layer_lengths[layer], 0, 1};
    const KvSpan to{dst, 0, 0, num_tokens};
    absl::StatusOr<KvCache::StepLease> read = cache.AcquireStep(layer, {&from, 1});
    absl::StatusOr<KvCache::StepLease> write =
        read.ok() ? cache.AcquireStep(layer, {&to, 1}) : read.status();
    if (!read.ok() || !write.ok()) {
      cache.Free(dst).IgnoreError();
      return !read.ok() ? read.status() : write.status();
    }
    const std::vector<int32_t>& from_blocks = read->entries()[0].blocks;
    const std::vector<int32_t>& to_blocks = write->entries()[0].blocks;
    for (int64_t b = 0; b < blocks; ++b) {
      std::copy_n(pool.KeyData(from_blocks[b], layer), floats, pool.KeyData(to_blocks[b], layer));
      std::copy_n(pool.ValueData(from_blocks[b], layer), floats,
                  pool.ValueData(to_blocks[b], layer));
    }
    write->Commit();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KvCacheStore::Fork(const std::string& model, int64_t generation, int64_t src,
                                const std::vector<int64_t>& dsts, int64_t num_tokens) {
  if (num_tokens < 1) return InvalidArgument("fork of sequence ", src, ": ", num_tokens,
                                             " positions (must be >= 1)");
  for (int64_t dst : dsts) {
    if (dst == src) return InvalidArgument("fork of sequence ", src, " into itself");
  }
  std::vector<std::shared_ptr<KvCache>> caches;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, cache] : caches_) {
      if (std::get<0>(key) == model && std::get<1>(key) == generation) caches.push_back(cache);
    }
  }
  for (const std::shared_ptr<KvCache>& cache : caches) {
    if (!cache->Info(src).ok()) continue;  // src never reached this device's attention
    for (size_t i = 0; i < dsts.size(); ++i) {
      absl::Status forked = ForkOne(*cache, src, dsts[i], num_tokens);
      if (!forked.ok()) {
        for (size_t j = 0; j < i; ++j) cache->Free(dsts[j]).IgnoreError();
        return forked;
      }
    }
  }
  return absl::OkStatus();
}

void KvCacheStore::Drop(const std::string& model, int64_t generation) {
  absl::MutexLock lock(&mu_);
  for (auto it = caches_.begin(); it != caches_.end();) {
    const bool match = std::get<0>(it->first) == model &&
                       (generation < 0 || std::get<1>(it->first) == generation);
    it = match ? caches_.erase(it) : std::next(it);
  }
}

KvCacheStore::Usage KvCacheStore::GetUsage() const {
  absl::MutexLock lock(&mu_);
  Usage usage;
  for (const auto& [key, cache] : caches_) {
    usage.bytes_used += cache->BytesUsed();
    usage.capacity_bytes += cache->CapacityBytes();
    usage.sequences += cache->num_sequences();
  }
  return usage;
}

}  // namespace meshserve
