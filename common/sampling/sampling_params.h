// What a generation request asks of the sampler: the one definition shared by
// the request decoders (OpenAI JSON, the gRPC Generate request, the CLI), the
// coordinator's scheduler and the workers' sampler (sampler.h).
//
// Field names and meanings are OpenAI's and vLLM's:
//   temperature  0: greedy (argmax, lowest id on ties); > 0 divides the logits.
//   top_k        0 or -1: off; k >= 1 keeps the k largest logits.
//   top_p        in (0, 1]; 1 is off; keeps the smallest set of most likely
//                tokens whose probability sums to >= top_p.
//   seed         the counter-based generator's key; with the token's position
//                in its sequence it fixes every random draw (sampler.h), so the
//                same seed and prompt give the same draws on any mesh, batched
//                or alone. Requests without a seed get one from the coordinator.
//   num_logprobs -1: none; 0: the sampled token's log-probability only; N in
//                [1, kMaxLogprobs]: also the N most likely tokens'.
//
// ValidateSamplingParams checks the ranges above (sampling_params.cc); a
// temperature below kGreedyTemperature (1e-5, vLLM's _SAMPLING_EPS) samples
// greedily, as in vLLM, and then top_k and top_p are ignored.
//
// Thread-safety: plain values.
#ifndef MESHSERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_
#define MESHSERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace meshserve {

inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int32_t num_logprobs = -1;
};

// The one home of the sampling fields' range checks: every request decoder
// (OpenAI JSON, the gRPC Generate request) and ValidateSamplingParams call
// these, so a bad field gets the same message on every edge:
// InvalidArgument "<field> <value> must be <range>", e.g.
//   "top_p 1.5 must be in (0, 1]".
// Values come as the widest type a decoder holds (JSON numbers are doubles
// and int64s) so that nothing is narrowed before it is checked.
//   temperature  finite (as a float) and >= 0 (NaN fails)
//   top_p        in (0, 1] (NaN fails)
//   top_k        >= -1 and <= INT32_MAX
//   logprobs     in [0, kMaxLogprobs] (the request's field; unset is -1 in
//                SamplingParams::num_logprobs and never reaches the check)
absl::Status CheckTemperature(double temperature);
absl::Status CheckTopP(double top_p);
absl::Status CheckTopK(int64_t top_k);
absl::Status CheckLogprobs(int64_t logprobs);

// OK, or the first failing check above on `params` (num_logprobs -1: none).
absl::Status ValidateSamplingParams(const SamplingParams& params);

// When a sequence ends, besides the context limit.
//   max_tokens      >= 1: the completion's length limit (finish_reason "length").
//   stop_token_ids  ids that end the sequence (finish_reason "stop"); the
//                   checkpoint's eos ids are added unless ignore_eos.
struct StopParams {
  int64_t max_tokens = 16;
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_
