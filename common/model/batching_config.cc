#include "common/model/batching_config.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"

namespace meshserve {

absl::Status ParseBatchingConfig(const Json& root, std::optional<BatchingConfig>* out) {
  out->reset();
  const Json* j = FindJsonField(root, "batching");
  if (j == nullptr) return absl::OkStatus();
  if (!j->is_object()) return InvalidArgument("batching must be an object, got ", ShowJson(*j));
  MS_RETURN_IF_ERROR(
      CheckJsonKeys(*j, {"max_batch_size", "max_queue_delay_us", "max_queue_size",
                         "max_concurrent_batches"},
                    "batching"));
  MS_ASSIGN_OR_RETURN(const Json* size, RequiredJsonField(*j, "max_batch_size", "batching"));
  BatchingConfig c;
  MS_ASSIGN_OR_RETURN(c.max_batch_size, JsonInt(*size, "batching.max_batch_size"));
  if (c.max_batch_size < 1) {
    return InvalidArgument("batching.max_batch_size must be >= 1, got ", c.max_batch_size);
  }
  if (const Json* d = FindJsonField(*j, "max_queue_delay_us")) {
    MS_ASSIGN_OR_RETURN(c.max_queue_delay_us, JsonInt(*d, "batching.max_queue_delay_us"));
    if (c.max_queue_delay_us < 0) {
      return InvalidArgument("batching.max_queue_delay_us must be >= 0, got ",
                             c.max_queue_delay_us);
    }
  }
  c.max_queue_size = 8 * c.max_batch_size;
  if (const Json* q = FindJsonField(*j, "max_queue_size")) {
    MS_ASSIGN_OR_RETURN(c.max_queue_size, JsonInt(*q, "batching.max_queue_size"));
    if (c.max_queue_size < 1) {
      return InvalidArgument("batching.max_queue_size must be >= 1, got ", c.max_queue_size);
    }
  }
  if (const Json* n = FindJsonField(*j, "max_concurrent_batches")) {
    MS_ASSIGN_OR_RETURN(c.max_concurrent_batches,
                        JsonInt(*n, "batching.max_concurrent_batches"));
    if (c.max_concurrent_batches < 1) {
      return InvalidArgument("batching.max_concurrent_batches must be >= 1, got ",
                             c.max_concurrent_batches);
    }
  }
  if (const Json* inputs = FindJsonField(root, "inputs"); inputs && inputs->is_object()) {
    for (auto it = inputs->begin(); it != inputs->end(); ++it) {
      const Json* shape = FindJsonField(it.value(), "shape");
      if (shape == nullptr || !shape->is_array() || shape->empty() ||
          !(*shape)[0].is_number_integer() || (*shape)[0].get<int64_t>() != -1) {
        return InvalidArgument("batching: input '", it.key(),
                               "' must have a leading -1 (batch) dim, got shape ",
                               shape == nullptr ? "none" : ShowJson(*shape));
      }
    }
  }
  *out = c;
  return absl::OkStatus();
}

}  // namespace meshserve
