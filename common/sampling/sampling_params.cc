// The sampling fields' range checks and ValidateSamplingParams (see
// sampling_params.h).
#include "common/sampling/sampling_params.h"

#include <cmath>
#include <limits>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::Status CheckTemperature(double temperature) {
  // Written so that NaN fails too; a double past float's range is not finite
  // as the float the sampler keeps.
  if (!(temperature >= 0) || !std::isfinite(static_cast<float>(temperature))) {
    return InvalidArgument("temperature ", temperature, " must be finite and >= 0");
  }
  return absl::OkStatus();
}

absl::Status CheckTopP(double top_p) {
  if (!(top_p > 0 && top_p <= 1)) {  // NaN fails too
    return InvalidArgument("top_p ", top_p, " must be in (0, 1]");
  }
  return absl::OkStatus();
}

absl::Status CheckTopK(int64_t top_k) {
  if (top_k < -1) {
    return InvalidArgument("top_k ", top_k, " must be >= -1 (0 and -1 turn it off)");
  }
  if (top_k > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("top_k ", top_k, " must be <= ",
                           std::numeric_limits<int32_t>::max());
  }
  return absl::OkStatus();
}

absl::Status CheckLogprobs(int64_t logprobs) {
  if (logprobs < 0 || logprobs > kMaxLogprobs) {
    return InvalidArgument("logprobs ", logprobs, " must be in [0, ", kMaxLogprobs, "]");
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  MS_RETURN_IF_ERROR(CheckTemperature(params.temperature));
  MS_RETURN_IF_ERROR(CheckTopK(params.top_k));
  MS_RETURN_IF_ERROR(CheckTopP(params.top_p));
  if (params.num_logprobs != -1) MS_RETURN_IF_ERROR(CheckLogprobs(params.num_logprobs));
  return absl::OkStatus();
}

}  // namespace meshserve
