// libFuzzer target: the OpenAI-compatible completions request decoder
// (server/coordinator/http/openai_request.h) and the encoders a parsed request
// leads to (openai_response.h). The input is a POST /v1/completions body.
// Invariants: never crashes or throws; every refusal is kInvalidArgument (also
// from ValidateForModel against a fixed model); an accepted request is inside
// every documented range; the response, chunk and error bodies encoded from
// it are valid JSON (the encoders replace invalid UTF-8).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/http/openai_request.h"
#include "server/coordinator/http/openai_response.h"

namespace {

using meshserve::CompletionRequest;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool IsJson(absl::string_view text) { return nlohmann::json::accept(text.begin(), text.end()); }

bool IsJsonEvent(const std::string& event) {
  return event.size() >= 8 && event.compare(0, 6, "data: ") == 0 &&
         event.compare(event.size() - 2, 2, "\n\n") == 0 &&
         IsJson(absl::string_view(event).substr(6, event.size() - 8));
}

// The documented ranges of an accepted request.
void CheckRanges(const CompletionRequest& r) {
  Check(!r.model.empty());
  Check(r.stop.max_tokens >= 1);
  Check(r.sampling.temperature >= 0);
  Check(r.sampling.top_p > 0 && r.sampling.top_p <= 1);
  Check(r.sampling.top_k >= 0);
  Check(r.logprobs >= -1 && r.logprobs <= meshserve::kMaxLogprobs);
  Check(r.sampling.num_logprobs == r.logprobs);
  Check(r.n >= 1 && r.n <= meshserve::kMaxCompletionChoices);
  Check(r.stop_strings.size() <= static_cast<size_t>(meshserve::kMaxStopStrings));
  for (const std::string& s : r.stop_strings) Check(!s.empty());
  for (int64_t id : r.stop.stop_token_ids) Check(id >= 0);
  Check(!r.include_usage || r.stream);
  if (r.has_text_prompt()) {
    Check(!r.prompt_text().empty());
  } else {
    Check(!r.prompt_ids().empty());
    for (int64_t id : r.prompt_ids()) Check(id >= 0);
  }
}

// Encodes what a server would answer for `r`: the prompt text stands in for
// the completion text, so invalid UTF-8 from the input reaches the encoders.
void EncodeFor(const CompletionRequest& r) {
  meshserve::CompletionMeta meta;
  meta.id = meshserve::MakeCompletionId(r.sampling.seed);
  meta.model = r.model;
  meta.return_token_ids = r.return_token_ids;
  if (!r.has_text_prompt()) meta.prompt_token_ids = r.prompt_ids();
  std::vector<meshserve::CompletionChoice> choices(static_cast<size_t>(r.n));
  for (int32_t i = 0; i < r.n; ++i) {
    choices[i].index = i;
    choices[i].text = r.has_text_prompt() ? r.prompt_text() : r.model;
    choices[i].token_ids = r.stop.stop_token_ids;
    choices[i].finish_reason = "length";
    if (r.logprobs >= 0) {
      meshserve::CompletionLogprobs lp;
      for (const std::string& s : r.stop_strings) {
        lp.tokens.push_back(s);
        lp.token_logprobs.push_back(r.sampling.temperature * -1.0f);
        lp.top_logprobs.push_back({{s, -1.0f}, {r.model, -2.0f}});
        lp.text_offset.push_back(static_cast<int64_t>(lp.tokens.size()));
      }
      choices[i].logprobs = lp;
    }
  }
  Check(IsJson(meshserve::EncodeCompletionResponse(meta, choices, {1, r.stop.max_tokens})));
  Check(IsJsonEvent(meshserve::EncodeCompletionChunk(meta, choices[0], true)));
  Check(IsJsonEvent(meshserve::EncodeUsageChunk(meta, {1, 2})));
  Check(IsJson(meshserve::EncodeModelList({r.model}, 0)));
}

void CheckRefusal(const absl::Status& status) {
  Check(status.code() == absl::StatusCode::kInvalidArgument);
  const meshserve::OpenAiError e = meshserve::EncodeOpenAiError(status);
  Check(e.http_status == 400);
  Check(IsJson(e.body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<CompletionRequest> r = meshserve::ParseCompletionRequest(body);
  if (!r.ok()) {
    CheckRefusal(r.status());
    return 0;
  }
  CheckRanges(*r);
  EncodeFor(*r);
  const int64_t prompt_len =
      r->has_text_prompt() ? static_cast<int64_t>(r->prompt_text().size())
                           : static_cast<int64_t>(r->prompt_ids().size());
  for (bool tokenizer : {false, true}) {
    absl::Status valid = meshserve::ValidateForModel(*r, {50257, 1024, tokenizer}, prompt_len);
    if (!valid.ok()) CheckRefusal(valid);
  }
  return 0;
}
