// KvCache (see kv_cache.h).
#include "common/kvcache/kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvBlockPoolOptions& options) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<KvBlockPool> pool, KvBlockPool::Create(options));
  return std::unique_ptr<KvCache>(new KvCache(std::move(pool)));
}

absl::Status KvCache::Reserve(int64_t seq, int64_t num_tokens) {
  if (num_tokens < 0) {
    return InvalidArgument("KvCache::Reserve: sequence ", seq, ": num_tokens ", num_tokens,
                           " must be >= 0");
  }
  const int64_t want = pool_->BlocksForTokens(num_tokens);
  absl::MutexLock lock(&mu_);
  auto it = sequences_.find(seq);
  const int64_t have = it == sequences_.end() ? 0 : static_cast<int64_t>(it->second->blocks.size());
  std::vector<int32_t> fresh;
  if (want > have) {
    absl::StatusOr<std::vector<int32_t>> got = pool_->Allocate(want - have);
    if (!got.ok()) {
      return AnnotateStatus(got.status(), "KvCache::Reserve: sequence ", seq, " to ", num_tokens,
                            " tokens (", have, " blocks held, ", want, " needed)");
    }
    fresh = *std::move(got);
  }
  if (it == sequences_.end()) {
    auto s = std::make_shared<Sequence>();
    s->layer_lengths.assign(static_cast<size_t>(pool_->options().num_layers), 0);
    it = sequences_.emplace(seq, std::move(s)).first;
  }
  std::vector<int32_t>& blocks = it->second->blocks;
  blocks.insert(blocks.end(), fresh.begin(), fresh.end());
  return absl::OkStatus();
}

absl::Status KvCache::Free(int64_t seq) {
  absl::MutexLock lock(&mu_);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return NotFound("KvCache::Free: unknown sequence ", seq);
  Sequence& s = *it->second;
  if (s.held) {
    s.freed = true;  // the lease returns the blocks when its call ends
  } else {
    pool_->Release(s.blocks);
    s.blocks.clear();
  }
  sequences_.erase(it);
  return absl::OkStatus();
}

absl::Status KvCache::Truncate(int64_t seq, int64_t num_tokens) {
  absl::MutexLock lock(&mu_);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return NotFound("KvCache::Truncate: unknown sequence ", seq);
  Sequence& s = *it->second;
  const int64_t reserved = static_cast<int64_t>(s.blocks.size()) * pool_->block_tokens();
  if (num_tokens < 0 || num_tokens > reserved) {
    return OutOfRange("KvCache::Truncate: sequence ", seq, ": num_tokens ", num_tokens,
                      " is outside [0, ", reserved, "] (its reserved tokens)");
  }
  if (s.held) {
    return FailedPrecondition("KvCache::Truncate: sequence ", seq,
                              " is held by a running CachedAttention call");
  }
  for (int64_t& len : s.layer_lengths) len = std::min(len, num_tokens);
  return absl::OkStatus();
}

absl::StatusOr<SequenceKvInfo> KvCache::Info(int64_t seq) const {
  absl::MutexLock lock(&mu_);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return NotFound("KvCache::Info: unknown sequence ", seq);
  const Sequence& s = *it->second;
  SequenceKvInfo info;
  info.layer_lengths = s.layer_lengths;
  info.num_tokens = *std::min_element(s.layer_lengths.begin(), s.layer_lengths.end());
  info.num_blocks = static_cast<int64_t>(s.blocks.size());
  info.reserved_tokens = info.num_blocks * pool_->block_tokens();
  return info;
}

std::vector<int64_t> KvCache::SequenceIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> ids;
  ids.reserve(sequences_.size());
  for (const auto& [id, s] : sequences_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int64_t KvCache::num_sequences() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sequences_.size());
}

absl::Status KvCache::CheckSpan(int64_t index, int64_t layer, const KvSpan& span,
                                const Sequence* s) const {
  if (span.num_tokens < 1 || span.past_len < 0) {
    return InvalidArgument("span ", index, " (sequence ", span.seq_id, "): num_tokens ",
                           span.num_tokens, " must be >= 1 and past_len ", span.past_len,
                           " >= 0");
  }
  if (s == nullptr) {
    return NotFound("span ", index, ": sequence ", span.seq_id,
                    " has no cache (Reserve it first)");
  }
  if (s->held) {
    return FailedPrecondition("span ", index, ": sequence ", span.seq_id,
                              " is held by another CachedAttention call");
  }
  const int64_t cached = s->layer_lengths[static_cast<size_t>(layer)];
  if (span.past_len != cached) {
    return FailedPrecondition("span ", index, ": past_len ", span.past_len, " but sequence ",
                              span.seq_id, " has ", cached, " tokens cached in layer ", layer);
  }
  const int64_t reserved = static_cast<int64_t>(s->blocks.size()) * pool_->block_tokens();
  if (span.past_len + span.num_tokens > reserved) {
    return FailedPrecondition("span ", index, ": sequence ", span.seq_id, " needs ",
                              span.past_len + span.num_tokens, " tokens (past_len ",
                              span.past_len, " + num_tokens ", span.num_tokens, ") but has ",
                              reserved, " reserved (Reserve it first)");
  }
  return absl::OkStatus();
}

absl::StatusOr<KvCache::StepLease> KvCache::AcquireStep(int64_t layer,
                                                        absl::Span<const KvSpan> spans) {
  const int64_t num_layers = pool_->options().num_layers;
  if (layer < 0 || layer >= num_layers) {
    return OutOfRange("layer ", layer, " is outside [0, ", num_layers, ")");
  }
  StepLease lease(this, layer);
  lease.entries_.reserve(spans.size());
  lease.held_.reserve(spans.size());
  absl::flat_hash_set<int64_t> seen;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < spans.size(); ++i) {
    const KvSpan& span = spans[i];
    if (!seen.insert(span.seq_id).second) {
      return InvalidArgument("span ", i, ": sequence ", span.seq_id, " is in two spans");
    }
    auto it = sequences_.find(span.seq_id);
    const Sequence* s = it == sequences_.end() ? nullptr : it->second.get();
    // On error the lease's destructor (after the lock is dropped) releases
    // the sequences held so far; none has been committed.
    MS_RETURN_IF_ERROR(CheckSpan(static_cast<int64_t>(i), layer, span, s));
    const int64_t num_blocks = pool_->BlocksForTokens(span.past_len + span.num_tokens);
    it->second->held = true;
    lease.held_.push_back(it->second);
    lease.entries_.push_back(
        {span, std::vector<int32_t>(it->second->blocks.begin(),
                                    it->second->blocks.begin() + num_blocks)});
  }
  return lease;
}

void KvCache::ReleaseStep(StepLease* lease) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < lease->held_.size(); ++i) {
    Sequence& s = *lease->held_[i];
    s.held = false;
    if (s.freed) {
      pool_->Release(s.blocks);
      s.blocks.clear();
    } else if (lease->committed_) {
      const KvSpan& span = lease->entries_[i].span;
      s.layer_lengths[static_cast<size_t>(lease->layer_)] = span.past_len + span.num_tokens;
    }
  }
  lease->held_.clear();
}

KvCache::StepLease::StepLease(StepLease&& other) noexcept
    : cache_(other.cache_),
      layer_(other.layer_),
      committed_(other.committed_),
      entries_(std::move(other.entries_)),
      held_(std::move(other.held_)) {
  other.held_.clear();
}

KvCache::StepLease::~StepLease() {
  if (!held_.empty()) cache_->ReleaseStep(this);
}

}  // namespace meshserve
