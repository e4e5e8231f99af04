// ValidateSamplingParams: the sampler's field ranges (see sampling_params.h).
#include "common/sampling/sampling_params.h"

#include <cmath>

#include "common/base/status_util.h"

namespace meshserve {

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return InvalidArgument("temperature ", params.temperature,
                           " must be finite and >= 0");
  }
  if (params.top_k < -1) {
    return InvalidArgument("top_k ", params.top_k,
                           " must be >= -1 (0 and -1 turn it off)");
  }
  // Written so that NaN fails too.
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return InvalidArgument("top_p ", params.top_p, " must be in (0, 1]");
  }
  if (params.num_logprobs < -1 || params.num_logprobs > kMaxLogprobs) {
    return InvalidArgument("num_logprobs ", params.num_logprobs, " must be in [-1, ",
                           kMaxLogprobs, "]");
  }
  return absl::OkStatus();
}

}  // namespace meshserve
