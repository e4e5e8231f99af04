#include "server/coordinator/http/openai_response.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/json/json_util.h"

namespace meshserve {
namespace {

// JSON has no infinity; vLLM writes -9999.0 for a -inf logprob.
constexpr double kNonFiniteLogprob = -9999.0;

double LogprobValue(float v) { return std::isfinite(v) ? v : kNonFiniteLogprob; }

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseEvent(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

Json IdList(const std::vector<int64_t>& ids) {
  Json out = Json::array();
  for (int64_t id : ids) out.push_back(id);
  return out;
}

Json LogprobsJson(const CompletionLogprobs& lp) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (const std::string& t : lp.tokens) tokens.push_back(t);
  for (float v : lp.token_logprobs) token_logprobs.push_back(LogprobValue(v));
  for (const auto& dict : lp.top_logprobs) {
    Json d = Json::object();
    for (const auto& [text, v] : dict) {
      if (!d.contains(text)) d[text] = LogprobValue(v);  // the more likely one stays
    }
    top.push_back(std::move(d));
  }
  for (int64_t o : lp.text_offset) offsets.push_back(o);
  Json out = Json::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top);
  out["text_offset"] = std::move(offsets);
  return out;
}

Json ChoiceJson(const CompletionMeta& meta, const CompletionChoice& c, bool with_prompt_ids) {
  Json out = Json::object();
  out["index"] = c.index;
  out["text"] = c.text;
  out["logprobs"] = c.logprobs ? LogprobsJson(*c.logprobs) : Json(nullptr);
  out["finish_reason"] = c.finish_reason.empty() ? Json(nullptr) : Json(c.finish_reason);
  if (meta.return_token_ids) {
    out["token_ids"] = IdList(c.token_ids);
    if (with_prompt_ids) out["prompt_token_ids"] = IdList(meta.prompt_token_ids);
  }
  return out;
}

Json UsageJson(const CompletionUsage& u) {
  Json out = Json::object();
  out["prompt_tokens"] = u.prompt_tokens;
  out["completion_tokens"] = u.completion_tokens;
  out["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return out;
}

// The fields every response and chunk starts with.
Json Envelope(const CompletionMeta& meta) {
  Json out = Json::object();
  out["id"] = meta.id;
  out["object"] = "text_completion";
  out["created"] = meta.created;
  out["model"] = meta.model;
  out["system_fingerprint"] = absl::StrCat("v", meta.weight_version);
  return out;
}

// The request field a refusal's message starts with ("top_p must ..."), or "".
std::string ParamOf(absl::string_view message) {
  static constexpr absl::string_view kFields[] = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed",
      "stop_token_ids", "stop", "ignore_eos", "stream_options", "stream", "logprobs",
      "n", "return_token_ids", "echo", "best_of", "presence_penalty",
      "frequency_penalty", "suffix", "logit_bias"};
  // A refusal annotated with the model ("model 'gpt2': prompt (9 tokens) +
  // ..."): the field is the one after it, if any.
  constexpr absl::string_view kModelPrefix = "model '";
  if (message.substr(0, kModelPrefix.size()) == kModelPrefix) {
    const size_t end = message.find('\'', kModelPrefix.size());  // the name's closing quote
    if (end != absl::string_view::npos && message.substr(end, 3) == "': ") {
      return ParamOf(message.substr(end + 3));
    }
  }
  constexpr absl::string_view kMissing = "missing field '";
  if (message.substr(0, kMissing.size()) == kMissing) {
    const size_t end = message.find('\'', kMissing.size());
    if (end != absl::string_view::npos) {
      return std::string(message.substr(kMissing.size(), end - kMissing.size()));
    }
  }
  for (absl::string_view f : kFields) {
    if (message.size() > f.size() && message.substr(0, f.size()) == f) {
      const char next = message[f.size()];
      if (next == ' ' || next == '[' || next == '.') return std::string(f);
    }
  }
  return "";
}

Json ErrorJson(const absl::Status& status, int http_status) {
  Json error = Json::object();
  error["message"] = status.ok() ? std::string("internal error: OK status reported as an error")
                                 : std::string(status.message());
  error["type"] = std::string(OpenAiErrorType(http_status));
  const std::string param = ParamOf(status.message());
  error["param"] = param.empty() ? Json(nullptr) : Json(param);
  error["code"] = http_status;
  Json out = Json::object();
  out["error"] = std::move(error);
  return out;
}

}  // namespace

std::string MakeCompletionId(uint64_t n) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(n));
  return absl::StrCat("cmpl-", hex);
}

std::string EncodeCompletionResponse(const CompletionMeta& meta,
                                     const std::vector<CompletionChoice>& choices,
                                     const CompletionUsage& usage) {
  Json out = Envelope(meta);
  Json list = Json::array();
  for (const CompletionChoice& c : choices) list.push_back(ChoiceJson(meta, c, true));
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return Dump(out);
}

std::string EncodeCompletionChunk(const CompletionMeta& meta, const CompletionChoice& choice,
                                  bool first_of_choice) {
  Json out = Envelope(meta);
  Json list = Json::array();
  list.push_back(ChoiceJson(meta, choice, first_of_choice));
  out["choices"] = std::move(list);
  out["usage"] = nullptr;
  return SseEvent(out);
}

std::string EncodeUsageChunk(const CompletionMeta& meta, const CompletionUsage& usage) {
  Json out = Envelope(meta);
  out["choices"] = Json::array();
  out["usage"] = UsageJson(usage);
  return SseEvent(out);
}

std::string EncodeDoneEvent() { return "data: [DONE]\n\n"; }

int OpenAiHttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;  // e.g. a model that cannot generate
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

absl::string_view OpenAiErrorType(int http_status) {
  switch (http_status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 429: return "RateLimitError";
    case 503: return "ServiceUnavailableError";
    case 504: return "GatewayTimeoutError";
    case 409: return "ConflictError";
    case 422: return "UnprocessableEntityError";
    default: return http_status < 500 ? "APIError" : "InternalServerError";
  }
}

OpenAiError EncodeOpenAiError(const absl::Status& status) {
  return EncodeOpenAiError(status, status.ok() ? 500 : OpenAiHttpStatusFor(status.code()));
}

OpenAiError EncodeOpenAiError(const absl::Status& status, int http_status) {
  return OpenAiError{http_status, Dump(ErrorJson(status, http_status))};
}

std::string EncodeErrorEvent(const absl::Status& status) {
  const int http = status.ok() ? 500 : OpenAiHttpStatusFor(status.code());
  return SseEvent(ErrorJson(status, http));
}

std::string EncodeModelList(const std::vector<std::string>& model_names, int64_t created) {
  Json data = Json::array();
  for (const std::string& name : model_names) {
    Json m = Json::object();
    m["id"] = name;
    m["object"] = "model";
    m["created"] = created;
    m["owned_by"] = "meshserve";
    data.push_back(std::move(m));
  }
  Json out = Json::object();
  out["object"] = "list";
  out["data"] = std::move(data);
  return Dump(out);
}

}  // namespace meshserve
