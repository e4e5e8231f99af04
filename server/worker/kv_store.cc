// KvCacheStore (kv_store.h).
#include "server/worker/kv_store.h"

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
