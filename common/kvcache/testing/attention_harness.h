// Test support for the KV cache tests: the NumPy reference (run through
// testdata/attention_reference.py in a fresh temp directory), an independent
// naive C++ causal attention (float64), and a driver that feeds sequences to
// a KvCache step by step through CachedAttention.
//
// The driver: each sequence has a prompt of `prompt_len` tokens fed in chunks
// of at most `chunk` tokens, then one token per step until its length; it
// joins at step `start_step`. Every step packs the active sequences' tokens
// into one CachedAttention call per layer (layer l of sequence s reads the
// reference data refs[l][s]), reserving their new length first. Each call's
// output rows are written into the sequence's `got` [len, Hq, D].
//
// Thread-safety: a Driver is used by one thread; distinct drivers over one
// KvCache may run concurrently on distinct sequence ids.
#ifndef MESHSERVE_COMMON_KVCACHE_TESTING_ATTENTION_HARNESS_H_
#define MESHSERVE_COMMON_KVCACHE_TESTING_ATTENTION_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kvcache/cached_attention.h"
#include "common/kvcache/kv_cache.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace kv_testing {

// One sequence's data: q [L, Hq, D], k/v [L, Hkv, D] float32, and the
// expected out [L, Hq, D] (float64 from NumPy, or float32).
struct RefSequence {
  Tensor q, k, v, out;
  int64_t length() const { return q.dim(0); }
};

struct ReferenceArgs {
  int seed = 1;
  int64_t hq = 4, hkv = 2, d = 8;
  std::vector<int64_t> lengths;
  float scale = 0.0f;  // 0: 1/sqrt(d)
};

// Runs /usr/bin/python3 testdata/attention_reference.py into a mkdtemp
// directory (removed afterwards) and reads its .npy files.
absl::StatusOr<std::vector<RefSequence>> NumpyReference(const ReferenceArgs& args);

// Random inputs (seeded) and the expected output by a naive float64 loop.
RefSequence NaiveReference(uint64_t seed, int64_t length, int64_t hq, int64_t hkv, int64_t d);

// The largest |got - want| / max(|want|, 1) over all elements (shapes must match).
double MaxRelativeError(const Tensor& got, const Tensor& want);

struct SequencePlan {
  int64_t seq_id = 0;
  int64_t prompt_len = 1;
  int64_t chunk = 1;
  int64_t start_step = 0;
  // Per layer: the reference data (all of the same length).
  std::vector<const RefSequence*> layers;
};

class Driver {
 public:
  Driver(KvCache* cache, std::vector<SequencePlan> plans, CachedAttentionOptions options = {});
  // Runs every step until all sequences are complete (does not Free them).
  absl::Status RunAll();
  // out rows produced for plans[i] in layer l: [length, Hq, D].
  const Tensor& got(size_t i, size_t layer) const { return got_[i][layer]; }
  int64_t num_steps() const { return steps_; }
  int64_t max_tokens_per_call() const { return max_tokens_per_call_; }

 private:
  absl::Status Step();

  KvCache* cache_;
  std::vector<SequencePlan> plans_;
  CachedAttentionOptions options_;
  std::vector<int64_t> done_;               // tokens fed per plan
  std::vector<std::vector<Tensor>> got_;    // [plan][layer]
  int64_t steps_ = 0;
  int64_t max_tokens_per_call_ = 0;
};

}  // namespace kv_testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_KVCACHE_TESTING_ATTENTION_HARNESS_H_
