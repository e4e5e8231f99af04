// The model file's optional "batching" key (like Triton's dynamic_batching):
//   "batching": {"max_batch_size": 32, "max_queue_delay_us": 500,
//                "max_queue_size": 256, "max_concurrent_batches": 2}
// max_batch_size (>= 1, required): most rows (leading-dim entries) one
// execution carries; max_queue_delay_us (>= 0, default 0): how long the first
// request of a batch waits for others; max_queue_size (>= 1, default
// 8 x max_batch_size): most requests queued per model before new ones get
// kResourceExhausted; max_concurrent_batches (>= 1, default 1, like the count
// of Triton's instance_group): batches of the model executing at once, so
// that one batch gathers while another runs on the workers. Batching requires every input's leading dim to be -1
// (checked here). A model without the key is served unbatched.
//
// Thread-safety: plain values and a pure function.
#ifndef MESHSERVE_COMMON_MODEL_BATCHING_CONFIG_H_
#define MESHSERVE_COMMON_MODEL_BATCHING_CONFIG_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"

namespace meshserve {

struct BatchingConfig {
  int64_t max_batch_size = 1;
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 8;
  int64_t max_concurrent_batches = 1;
};

// Reads root["batching"] of a model file into *out (left empty when the key
// is absent); every root["inputs"][name]["shape"] must start with -1 (the
// inputs themselves are ParseModelFile's check).
// \error kInvalidArgument naming the field.
// (`root` is common/json's Json; only forward-declared here so that
// model_file.h's includers do not all see the JSON library.)
absl::Status ParseBatchingConfig(const nlohmann::ordered_json& root,
                                 std::optional<BatchingConfig>* out);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_MODEL_BATCHING_CONFIG_H_
