// The OpenAI-compatible completions responses, as JSON text: a whole
// completion, the server-sent events of a stream, the error body, and the
// model list of GET /v1/models. Field names are OpenAI's, plus vLLM's
// token_ids / prompt_token_ids (when the request set return_token_ids).
//
//   {"id": "cmpl-00000000000000a1", "object": "text_completion", "created": 1700000000,
//    "model": "gpt2", "system_fingerprint": "v3",
//    "choices": [{"index": 0, "text": " world", "finish_reason": "length",
//                 "logprobs": null | {"tokens": [" world"], "token_logprobs": [-0.5],
//                                     "top_logprobs": [{" world": -0.5, " there": -1.2}],
//                                     "text_offset": [5]},
//                 "token_ids": [995], "prompt_token_ids": [15496]}],   (return_token_ids)
//    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
//
// Streams: each chunk is `data: <the same object>\n\n` with the choice's new
// text (and token_ids) only, "finish_reason": null until its last chunk and
// "usage": null; prompt_token_ids ride on a choice's first chunk only (as
// vLLM's). With stream_options.include_usage a last chunk carries "choices": []
// and the usage; then `data: [DONE]\n\n`.
//
// Logprobs that are not finite (-inf) are written as -9999.0, as vLLM does (JSON
// has no infinity). In a top_logprobs dict two tokens with the same text keep
// the first (more likely) one. Invalid UTF-8 in any string is replaced by
// U+FFFD: the encoders never throw.
//
// Errors: vLLM's shape, {"error": {"message", "type", "param", "code"}} with
// "code" the HTTP status (an integer) and "type" the OpenAI SDKs' exception
// class for that status (OpenAiHttpStatusFor / OpenAiErrorType):
//   400 BadRequestError        kInvalidArgument, kOutOfRange, kFailedPrecondition
//                              (the generator's "model 'm' cannot generate")
//   401 AuthenticationError    kUnauthenticated
//   403 PermissionDeniedError  kPermissionDenied
//   404 NotFoundError          kNotFound
//   429 RateLimitError         kResourceExhausted
//   503 ServiceUnavailableError kUnavailable
//   504 GatewayTimeoutError    kDeadlineExceeded
//   500 InternalServerError    anything else
// "param" is the request field the message starts with (message "top_p must
// be in (0, 1], got 2" -> "top_p"; after a "model 'NAME': " prefix, the field
// that follows it), else null.
//
// Thread-safety: pure functions; the structs are plain values.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// OpenAI's completions logprobs, one entry per generated token in each list.
struct CompletionLogprobs {
  std::vector<std::string> tokens;
  std::vector<float> token_logprobs;
  // Per token: the most likely tokens' texts and logprobs, most likely first.
  std::vector<std::vector<std::pair<std::string, float>>> top_logprobs;
  std::vector<int64_t> text_offset;  // each token's offset in the completion text
};

struct CompletionChoice {
  int32_t index = 0;
  std::string text;                        // whole, or a chunk's new text
  std::vector<int64_t> token_ids;          // whole, or a chunk's new ids
  std::optional<CompletionLogprobs> logprobs;  // nullopt: "logprobs": null
  std::string finish_reason;               // "stop", "length"; "" -> null
};

struct CompletionUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all n choices
};

// What every response and chunk of one request carries.
struct CompletionMeta {
  std::string id;       // "cmpl-..." (MakeCompletionId)
  int64_t created = 0;  // Unix seconds
  std::string model;
  int64_t weight_version = 0;  // -> "system_fingerprint": "v<N>"
  bool return_token_ids = false;
  std::vector<int64_t> prompt_token_ids;  // written when return_token_ids
};

// "cmpl-" and `n` as 16 lowercase hex digits.
std::string MakeCompletionId(uint64_t n);

// The whole (non-streamed) response.
std::string EncodeCompletionResponse(const CompletionMeta& meta,
                                     const std::vector<CompletionChoice>& choices,
                                     const CompletionUsage& usage);

// One SSE event for one choice's new text/ids: "data: {...}\n\n".
// `first_of_choice` adds prompt_token_ids (with return_token_ids).
std::string EncodeCompletionChunk(const CompletionMeta& meta, const CompletionChoice& choice,
                                  bool first_of_choice);
// The include_usage event: "choices": [] and the usage.
std::string EncodeUsageChunk(const CompletionMeta& meta, const CompletionUsage& usage);
// "data: [DONE]\n\n".
std::string EncodeDoneEvent();

// An error as an HTTP answer.
struct OpenAiError {
  int http_status = 500;
  std::string body;
};
int OpenAiHttpStatusFor(absl::StatusCode code);
absl::string_view OpenAiErrorType(int http_status);
// `status` must not be OK (an OK status is reported as a 500 internal error).
OpenAiError EncodeOpenAiError(const absl::Status& status);
// The same with the HTTP status given (the transport's 413 for a body over
// its limit); a 4xx not listed above has "type" "APIError" (the SDKs' base).
OpenAiError EncodeOpenAiError(const absl::Status& status, int http_status);
// In a stream that already sent 200: the error as one SSE event
// ("data: {"error": ...}\n\n"), as vLLM's streams end on a failure.
std::string EncodeErrorEvent(const absl::Status& status);

// GET /v1/models: {"object": "list", "data": [{"id": name, "object": "model",
// "created": created, "owned_by": "meshserve"}, ...]}, in the order given.
std::string EncodeModelList(const std::vector<std::string>& model_names, int64_t created);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
