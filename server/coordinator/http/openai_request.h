// The OpenAI-compatible completions request (POST /v1/completions): JSON body
// -> CompletionRequest, and the checks that need the model (ModelLimits).
// Field names and meanings are OpenAI's and vLLM's:
//
//   {"model": "gpt2",                        required string
//    "prompt": "Hello" | [15496, 11] | ["Hello"] | [[15496, 11]],
//                                            one prompt; several: refused
//    "max_tokens": 16,                       >= 1 (default 16)
//    "temperature": 1.0,                     >= 0 (0: greedy)
//    "top_p": 1.0,                           (0, 1]
//    "top_k": 0,                             -1 or 0: off, >= 1 (vLLM's)
//    "seed": 7,                              any 64-bit integer (optional)
//    "stop": "\n" | ["\n", "."],             at most 4 non-empty strings
//    "stop_token_ids": [50256],              ids >= 0 (vLLM's)
//    "ignore_eos": false,                    (vLLM's)
//    "stream": false, "stream_options": {"include_usage": true} (only with stream),
//    "logprobs": null | 0..20, "n": 1..16, "best_of": null | n,
//    "return_token_ids": false,              (vLLM's)
//    "echo": false, "suffix": null,          true / a suffix: not supported
//    "presence_penalty": 0, "frequency_penalty": 0,   other values: not supported
//    "logit_bias": null | {},                entries: not supported
//    "user": ...}                            ignored
// null means "absent" for every field (OpenAI's clients send nulls). Unknown
// fields are ignored (clients send extras), as vLLM does.
//
// Errors: all kInvalidArgument, the message naming the field and the value:
//   "max_tokens must be >= 1, got 0", "max_tokens must be an integer, got \"3\"",
//   "top_p 1.5 must be in (0, 1]", "request body is not valid JSON: ...".
// A body nested deeper than kMaxOpenAiJsonDepth levels is refused before it is
// parsed (nlohmann's dump and destructor recurse).
//
// Thread-safety: pure functions; the structs are plain values.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_REQUEST_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sampling/sampling_params.h"
#include "server/coordinator/generate/generator.h"

namespace meshserve {

inline constexpr int kMaxOpenAiJsonDepth = 32;
inline constexpr int32_t kMaxCompletionChoices = 16;  // n
inline constexpr int kMaxStopStrings = 4;             // OpenAI's limit

struct CompletionRequest {
  std::string model;
  // The prompt: text (to be tokenized) or token ids, never empty.
  std::variant<std::string, std::vector<int64_t>> prompt;
  // temperature, top_k (-1 is stored as 0: off), top_p, seed,
  // num_logprobs (= logprobs, -1 when absent).
  SamplingParams sampling;
  bool has_seed = false;  // no "seed": the coordinator picks one
  StopParams stop;        // max_tokens, stop_token_ids, ignore_eos
  std::vector<std::string> stop_strings;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t n = 1;
  bool return_token_ids = false;
  int32_t logprobs = -1;  // -1: absent; else 0..kMaxLogprobs

  bool has_text_prompt() const { return std::holds_alternative<std::string>(prompt); }
  const std::string& prompt_text() const { return std::get<std::string>(prompt); }
  const std::vector<int64_t>& prompt_ids() const {
    return std::get<std::vector<int64_t>>(prompt);
  }
};

// What ValidateForModel needs to know of the model.
struct ModelLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // positions: prompt + completion
  bool has_tokenizer = false;
};

// The body of POST /v1/completions -> the request. Never throws.
// \error kInvalidArgument: not JSON, not an object, too deep, a field of the
// wrong type or out of its range, an unsupported feature (see above).
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body);

// The checks that need the model. `prompt_len` is the prompt's length in
// tokens (the id count, or the text's after tokenization; 0 when a text
// prompt cannot be tokenized yet, which is then refused for the tokenizer).
// \error kInvalidArgument:
//   "prompt is text but model 'm' has no tokenizer: send token ids";
//   "prompt token id 50257 (at 3) is outside the vocabulary [0, 50257)";
//   "prompt is empty after tokenization";
//   "prompt (120 tokens) + max_tokens (2000) = 2120 exceeds the model's
//    context of 1024".
absl::Status ValidateForModel(const CompletionRequest& request, const ModelLimits& limits,
                              int64_t prompt_len);

// The GenerationRequest of choice `choice` (0 <= choice < request.n): the model,
// the prompt (a text prompt goes as prompt_text, for the generator's
// tokenizer), sampling and stop ids. With a seed, choice i runs with
// seed + i (mod 2^64), so the n samples differ and each is reproducible;
// without one the generator draws a seed per sequence. The stop strings go
// too (the generator ends a sequence at one).
GenerationRequest ToGenerateRequest(const CompletionRequest& request, int32_t choice);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_REQUEST_H_
