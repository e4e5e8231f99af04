// KvBlockPool (see kv_block_pool.h).
#include "common/kvcache/kv_block_pool.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

constexpr int64_t kBlockAlignment = 64;

absl::Status CheckPositive(absl::string_view name, int64_t value) {
  if (value < 1) return InvalidArgument("KvBlockPool: ", name, " ", value, " must be >= 1");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> KvBlockPool::BytesPerBlock(const KvBlockPoolOptions& options) {
  MS_RETURN_IF_ERROR(CheckPositive("block_tokens", options.block_tokens));
  MS_RETURN_IF_ERROR(CheckPositive("num_layers", options.num_layers));
  MS_RETURN_IF_ERROR(CheckPositive("num_kv_heads", options.num_kv_heads));
  MS_RETURN_IF_ERROR(CheckPositive("head_dim", options.head_dim));
  if (options.dtype != DType::kFloat32) {
    return InvalidArgument("KvBlockPool: dtype ", DTypeName(options.dtype),
                           " is not supported (float32 only)");
  }
  int64_t bytes = 2 * 4;  // k and v, float32
  for (int64_t f : {options.num_layers, options.block_tokens, options.num_kv_heads,
                    options.head_dim}) {
    if (!CheckedMul(bytes, f, &bytes) || bytes > (int64_t{1} << 40)) {
      return InvalidArgument("KvBlockPool: a block of ", options.block_tokens, " tokens x ",
                             options.num_layers, " layers x ", options.num_kv_heads,
                             " kv heads x head_dim ", options.head_dim, " is too large");
    }
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<KvBlockPool>> KvBlockPool::Create(
    const KvBlockPoolOptions& options) {
  MS_ASSIGN_OR_RETURN(const int64_t bytes_per_block, BytesPerBlock(options));
  if (options.capacity_bytes < 0) {
    return InvalidArgument("KvBlockPool: capacity_bytes ", options.capacity_bytes,
                           " must be >= 0");
  }
  const int64_t num_blocks =
      std::min(options.capacity_bytes / bytes_per_block, KvBlockPool::kMaxBlocks);
  if (num_blocks == 0) {
    return ResourceExhausted("KvBlockPool: capacity_bytes ", options.capacity_bytes,
                             " holds no block of ", bytes_per_block, " bytes (", options.block_tokens,
                             " tokens x ", options.num_layers, " layers x ",
                             options.num_kv_heads, " kv heads x head_dim ", options.head_dim,
                             " x k,v x 4 bytes)");
  }
  return std::unique_ptr<KvBlockPool>(new KvBlockPool(options, bytes_per_block, num_blocks));
}

KvBlockPool::KvBlockPool(const KvBlockPoolOptions& options, int64_t bytes_per_block,
                         int64_t num_blocks)
    : options_(options),
      bytes_per_block_(bytes_per_block),
      num_blocks_(num_blocks),
      layer_stride_(bytes_per_block / 4 / options.num_layers),
      kv_stride_(bytes_per_block / 4 / options.num_layers / 2),
      memory_(static_cast<size_t>(num_blocks), nullptr) {}

KvBlockPool::~KvBlockPool() {
  for (float* p : memory_) std::free(p);
}

absl::StatusOr<std::vector<int32_t>> KvBlockPool::Allocate(int64_t num_blocks) {
  if (num_blocks < 0) {
    return InvalidArgument("KvBlockPool::Allocate: num_blocks ", num_blocks, " must be >= 0");
  }
  absl::MutexLock lock(&mu_);
  const int64_t num_free = static_cast<int64_t>(free_.size()) + (num_blocks_ - next_fresh_);
  if (num_blocks > num_free) {
    return ResourceExhausted("KV cache: ", num_blocks, " blocks needed, ", num_free, " free (of ",
                             num_blocks_, " blocks of ", options_.block_tokens, " tokens)");
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_blocks));
  while (static_cast<int64_t>(out.size()) < num_blocks && !free_.empty()) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  // Fresh blocks: allocate all their memory first, so a failure takes nothing.
  const int64_t fresh = num_blocks - static_cast<int64_t>(out.size());
  for (int64_t i = 0; i < fresh; ++i) {
    const int32_t id = next_fresh_ + static_cast<int32_t>(i);
    if (memory_[id] != nullptr) continue;
    memory_[id] = static_cast<float*>(std::aligned_alloc(
        kBlockAlignment,
        static_cast<size_t>(CeilOfRatio(bytes_per_block_, kBlockAlignment) * kBlockAlignment)));
    if (memory_[id] == nullptr) {
      for (int32_t b : out) free_.push_back(b);  // undo (fresh ids stay fresh)
      return ResourceExhausted("KV cache: cannot allocate block ", id, " (", bytes_per_block_,
                               " bytes)");
    }
  }
  for (int64_t i = 0; i < fresh; ++i) out.push_back(next_fresh_++);
  return out;
}

void KvBlockPool::Release(absl::Span<const int32_t> blocks) {
  absl::MutexLock lock(&mu_);
  for (int32_t b : blocks) {
    MS_DCHECK(b >= 0 && b < next_fresh_) << "block " << b;
    free_.push_back(b);
  }
  MS_DCHECK(static_cast<int64_t>(free_.size()) <= next_fresh_);
}

float* KvBlockPool::KeyData(int32_t block, int64_t layer) const {
  MS_DCHECK(block >= 0 && block < num_blocks_ && memory_[block] != nullptr) << "block " << block;
  MS_DCHECK(layer >= 0 && layer < options_.num_layers) << "layer " << layer;
  return memory_[block] + layer * layer_stride_;
}

float* KvBlockPool::ValueData(int32_t block, int64_t layer) const {
  return KeyData(block, layer) + kv_stride_;
}

int64_t KvBlockPool::BlocksForTokens(int64_t num_tokens) const {
  // Not CeilOfRatio: num_tokens + block_tokens - 1 may overflow.
  return num_tokens / options_.block_tokens + (num_tokens % options_.block_tokens != 0 ? 1 : 0);
}

int64_t KvBlockPool::NumFreeBlocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size()) + (num_blocks_ - next_fresh_);
}

int64_t KvBlockPool::BytesUsed() const {
  return (num_blocks_ - NumFreeBlocks()) * bytes_per_block_;
}

int64_t KvBlockPool::BytesAllocated() const {
  absl::MutexLock lock(&mu_);
  return int64_t{next_fresh_} * bytes_per_block_;
}

std::string KvBlockPool::ToString() const {
  return absl::StrCat("kv_pool[blocks=", num_blocks_, " x ", options_.block_tokens, " tokens, ",
                      bytes_per_block_, " bytes each, used=", num_blocks_ - NumFreeBlocks(), "]");
}

}  // namespace meshserve
