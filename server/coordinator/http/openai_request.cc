#include "server/coordinator/http/openai_request.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"

namespace meshserve {
namespace {

// The deepest nesting of arrays and objects in `text` exceeds `max_depth`
// (brackets inside strings do not count). Malformed text is left to the parser.
bool NestsDeeperThan(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// An integer; an integral float (16.0) counts too, as pydantic's lax ints do.
absl::StatusOr<int64_t> ToInt(const Json& v, absl::string_view path) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  return JsonInt(v, path);
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj, const char* key) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  MS_ASSIGN_OR_RETURN(int64_t i, ToInt(*v, key));
  return std::optional<int64_t>(i);
}

absl::StatusOr<std::optional<double>> OptNumber(const Json& obj, const char* key) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return std::optional<double>();
  MS_ASSIGN_OR_RETURN(double d, JsonNumber(*v, key));
  return std::optional<double>(d);
}

absl::StatusOr<bool> OptBool(const Json& obj, const char* key, const char* path = nullptr) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return false;
  return JsonBool(*v, path != nullptr ? path : key);
}

// A list of token ids (integers >= 0); `path` names it ("prompt", "stop_token_ids").
absl::StatusOr<std::vector<int64_t>> TokenIds(const Json& list, absl::string_view path) {
  if (!list.is_array()) {
    return InvalidArgument(path, " must be a list of token ids, got ", ShowJson(list));
  }
  std::vector<int64_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = absl::StrCat(path, "[", i, "]");
    MS_ASSIGN_OR_RETURN(int64_t id, ToInt(list[i], at));
    if (id < 0) return InvalidArgument(at, " must be a token id >= 0, got ", id);
    ids.push_back(id);
  }
  return ids;
}

// One prompt: a non-empty string or a non-empty list of token ids.
absl::Status SetOnePrompt(const Json& p, absl::string_view path, CompletionRequest* r) {
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) {
      return InvalidArgument(path, " must not be empty");
    }
    r->prompt = p.get<std::string>();
    return absl::OkStatus();
  }
  if (!p.is_array()) {
    return InvalidArgument(path, " must be a string or a list of token ids, got ",
                           ShowJson(p));
  }
  if (p.empty()) return InvalidArgument(path, " must not be empty, got []");
  MS_ASSIGN_OR_RETURN(r->prompt, TokenIds(p, path));
  return absl::OkStatus();
}

// "prompt": "text" | [ids] | ["text"] | [[ids]]; several prompts are refused.
absl::Status ParsePrompt(const Json& obj, CompletionRequest* r) {
  const Json* p = FindJsonField(obj, "prompt");
  if (p == nullptr) return InvalidArgument("missing field 'prompt'");
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > 1) {
      return InvalidArgument("prompt holds ", p->size(),
                             " prompts: batched prompts are not supported; use n for "
                             "several samples of one prompt, or separate requests");
    }
    return SetOnePrompt((*p)[0], "prompt[0]", r);
  }
  return SetOnePrompt(*p, "prompt", r);
}

absl::Status ParseModel(const Json& obj, CompletionRequest* r) {
  const Json* m = FindJsonField(obj, "model");
  if (m == nullptr) return InvalidArgument("missing field 'model'");
  MS_ASSIGN_OR_RETURN(r->model, JsonString(*m, "model"));
  if (r->model.empty()) return InvalidArgument("model must not be empty");
  return absl::OkStatus();
}

// seed: any integer in [-2^63, 2^64): the generator's key, its bits as uint64.
absl::Status ParseSeed(const Json& obj, CompletionRequest* r) {
  const Json* s = FindJsonField(obj, "seed");
  if (s == nullptr) return absl::OkStatus();
  r->has_seed = true;
  if (s->is_number_unsigned()) {
    r->sampling.seed = s->get<uint64_t>();
    return absl::OkStatus();
  }
  MS_ASSIGN_OR_RETURN(int64_t seed, ToInt(*s, "seed"));
  r->sampling.seed = static_cast<uint64_t>(seed);
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& obj, CompletionRequest* r) {
  MS_ASSIGN_OR_RETURN(std::optional<double> temperature, OptNumber(obj, "temperature"));
  if (temperature) {
    MS_RETURN_IF_ERROR(CheckTemperature(*temperature));
    r->sampling.temperature = static_cast<float>(*temperature);
  }
  MS_ASSIGN_OR_RETURN(std::optional<double> top_p, OptNumber(obj, "top_p"));
  if (top_p) {
    MS_RETURN_IF_ERROR(CheckTopP(*top_p));
    r->sampling.top_p = static_cast<float>(*top_p);
    if (r->sampling.top_p <= 0) r->sampling.top_p = std::numeric_limits<float>::min();
  }
  MS_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, OptInt(obj, "top_k"));
  if (top_k) {
    MS_RETURN_IF_ERROR(CheckTopK(*top_k));
    r->sampling.top_k = *top_k == -1 ? 0 : static_cast<int32_t>(*top_k);
  }
  MS_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs, OptInt(obj, "logprobs"));
  if (logprobs) {
    MS_RETURN_IF_ERROR(CheckLogprobs(*logprobs));
    r->logprobs = static_cast<int32_t>(*logprobs);
    r->sampling.num_logprobs = r->logprobs;
  }
  return ParseSeed(obj, r);
}

// "stop": "s" | ["s", ...] (at most kMaxStopStrings, none empty).
absl::Status ParseStopStrings(const Json& obj, CompletionRequest* r) {
  const Json* stop = FindJsonField(obj, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    if (stop->get_ref<const std::string&>().empty()) {
      return InvalidArgument("stop must not be an empty string");
    }
    r->stop_strings = {stop->get<std::string>()};
    return absl::OkStatus();
  }
  if (!stop->is_array()) {
    return InvalidArgument("stop must be a string or a list of strings, got ", ShowJson(*stop));
  }
  MS_ASSIGN_OR_RETURN(r->stop_strings, JsonStringList(*stop, "stop"));
  if (r->stop_strings.size() > static_cast<size_t>(kMaxStopStrings)) {
    return InvalidArgument("stop must hold at most ", kMaxStopStrings, " strings, got ",
                           r->stop_strings.size());
  }
  for (size_t i = 0; i < r->stop_strings.size(); ++i) {
    if (r->stop_strings[i].empty()) return InvalidArgument("stop[", i, "] must not be empty");
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& obj, CompletionRequest* r) {
  MS_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, OptInt(obj, "max_tokens"));
  if (max_tokens) {
    if (*max_tokens < 1) return InvalidArgument("max_tokens must be >= 1, got ", *max_tokens);
    r->stop.max_tokens = *max_tokens;
  }
  if (const Json* ids = FindJsonField(obj, "stop_token_ids")) {
    MS_ASSIGN_OR_RETURN(r->stop.stop_token_ids, TokenIds(*ids, "stop_token_ids"));
  }
  MS_ASSIGN_OR_RETURN(r->stop.ignore_eos, OptBool(obj, "ignore_eos"));
  return ParseStopStrings(obj, r);
}

absl::Status ParseStreamAndChoices(const Json& obj, CompletionRequest* r) {
  MS_ASSIGN_OR_RETURN(r->stream, OptBool(obj, "stream"));
  if (const Json* options = FindJsonField(obj, "stream_options")) {
    if (!options->is_object()) {
      return InvalidArgument("stream_options must be an object, got ", ShowJson(*options));
    }
    if (!r->stream) {
      return InvalidArgument("stream_options is only allowed when stream is true, got ",
                             ShowJson(*options));
    }
    MS_ASSIGN_OR_RETURN(r->include_usage,
                        OptBool(*options, "include_usage", "stream_options.include_usage"));
  }
  MS_ASSIGN_OR_RETURN(r->return_token_ids, OptBool(obj, "return_token_ids"));
  MS_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptInt(obj, "n"));
  if (n) {
    if (*n < 1 || *n > kMaxCompletionChoices) {
      return InvalidArgument("n must be in [1, ", kMaxCompletionChoices, "], got ", *n);
    }
    r->n = static_cast<int32_t>(*n);
  }
  MS_ASSIGN_OR_RETURN(std::optional<int64_t> best_of, OptInt(obj, "best_of"));
  if (best_of && *best_of != r->n) {
    return InvalidArgument("best_of must equal n (", r->n,
                           "): ranking several samples is not supported, got ", *best_of);
  }
  return absl::OkStatus();
}

// Features accepted only in their "off" form: echo, suffix, the penalties, logit_bias.
absl::Status ParseUnsupported(const Json& obj) {
  MS_ASSIGN_OR_RETURN(bool echo, OptBool(obj, "echo"));
  if (echo) return InvalidArgument("echo is not supported, got true");
  if (const Json* suffix = FindJsonField(obj, "suffix")) {
    MS_ASSIGN_OR_RETURN(std::string s, JsonString(*suffix, "suffix"));
    if (!s.empty()) return InvalidArgument("suffix is not supported, got ", ShowJson(*suffix));
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    MS_ASSIGN_OR_RETURN(std::optional<double> penalty, OptNumber(obj, key));
    if (penalty && *penalty != 0) {
      return InvalidArgument(key, " is not supported (only 0), got ", *penalty);
    }
  }
  if (const Json* bias = FindJsonField(obj, "logit_bias")) {
    if (!bias->is_object()) {
      return InvalidArgument("logit_bias must be an object, got ", ShowJson(*bias));
    }
    if (!bias->empty()) {
      return InvalidArgument("logit_bias is not supported, got ", ShowJson(*bias));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CompletionRequest> ParseObject(const Json& obj) {
  CompletionRequest r;
  MS_RETURN_IF_ERROR(ParseModel(obj, &r));
  MS_RETURN_IF_ERROR(ParsePrompt(obj, &r));
  MS_RETURN_IF_ERROR(ParseStop(obj, &r));
  MS_RETURN_IF_ERROR(ParseSampling(obj, &r));
  MS_RETURN_IF_ERROR(ParseStreamAndChoices(obj, &r));
  MS_RETURN_IF_ERROR(ParseUnsupported(obj));
  return r;
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body) {
  if (NestsDeeperThan(body, kMaxOpenAiJsonDepth)) {
    return InvalidArgument("request body nests deeper than ", kMaxOpenAiJsonDepth, " levels");
  }
  try {
    absl::StatusOr<Json> json = ParseJsonText(body);
    if (!json.ok()) {
      return InvalidArgument("request body is not valid JSON: ", json.status().message());
    }
    if (!json->is_object()) {
      return InvalidArgument("request body must be a JSON object, got ", ShowJson(*json));
    }
    return ParseObject(*json);
  } catch (const std::exception& e) {  // nlohmann's get<> and dump; not expected
    return InvalidArgument("request body could not be read: ", e.what());
  }
}

absl::Status ValidateForModel(const CompletionRequest& request, const ModelLimits& limits,
                              int64_t prompt_len) {
  if (request.has_text_prompt()) {
    if (!limits.has_tokenizer) {
      return InvalidArgument("prompt is text but model '", request.model,
                             "' has no tokenizer: send the prompt as a list of token ids");
    }
  } else {
    const std::vector<int64_t>& ids = request.prompt_ids();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= limits.vocab_size) {
        return InvalidArgument("prompt token id ", ids[i], " (at ", i,
                               ") is outside the vocabulary [0, ", limits.vocab_size,
                               ") of model '", request.model, "'");
      }
    }
  }
  if (prompt_len < 1) return InvalidArgument("prompt is empty after tokenization");
  // Both are in [1, 2^63), so their sum fits in uint64.
  const uint64_t total =
      static_cast<uint64_t>(prompt_len) + static_cast<uint64_t>(request.stop.max_tokens);
  if (limits.context_length < 0 || total > static_cast<uint64_t>(limits.context_length)) {
    return InvalidArgument("prompt (", prompt_len, " tokens) + max_tokens (",
                           request.stop.max_tokens, ") = ", total,
                           " exceeds the model's context of ", limits.context_length);
  }
  return absl::OkStatus();
}

GenerationRequest ToGenerateRequest(const CompletionRequest& request, int32_t choice) {
  GenerationRequest out;
  out.model = request.model;
  if (request.has_text_prompt()) {
    out.prompt_text = request.prompt_text();
  } else {
    out.prompt_ids = request.prompt_ids();
  }
  out.sampling = request.sampling;
  out.has_seed = request.has_seed;
  if (request.has_seed) out.sampling.seed = request.sampling.seed + static_cast<uint64_t>(choice);
  out.stop = request.stop;
  out.stop_strings = request.stop_strings;
  return out;
}

}  // namespace meshserve
