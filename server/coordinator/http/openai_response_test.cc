// Tests of the /v1/completions and /v1/models encoders: each body is parsed
// back with nlohmann and checked field by field; SSE framing; the error body
// and its HTTP status per status code.
#include "server/coordinator/http/openai_response.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using ::testing::EndsWith;
using ::testing::StartsWith;
using Json = nlohmann::json;

CompletionMeta Meta(bool return_token_ids) {
  CompletionMeta m;
  m.id = MakeCompletionId(0xa1);
  m.created = 1700000000;
  m.model = "gpt2";
  m.weight_version = 3;
  m.return_token_ids = return_token_ids;
  m.prompt_token_ids = {15496, 11};
  return m;
}

CompletionChoice Choice(int32_t index, const std::string& text, std::vector<int64_t> ids,
                        const std::string& finish_reason) {
  CompletionChoice c;
  c.index = index;
  c.text = text;
  c.token_ids = std::move(ids);
  c.finish_reason = finish_reason;
  return c;
}

// The JSON of one SSE event "data: {...}\n\n".
Json EventJson(const std::string& event) {
  EXPECT_THAT(event, StartsWith("data: "));
  EXPECT_THAT(event, EndsWith("\n\n"));
  const std::string payload = event.substr(6, event.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos) << "one line per event";
  return Json::parse(payload);
}

void ExpectEnvelope(const Json& j) {
  EXPECT_EQ(j.at("id"), "cmpl-00000000000000a1");
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("created"), 1700000000);
  EXPECT_EQ(j.at("model"), "gpt2");
  EXPECT_EQ(j.at("system_fingerprint"), "v3");
}

// The first choice of `j` (the caller asserted there is one), after checking
// the envelope: it has `index`, `text`, null logprobs and `finish_reason`
// (JSON null when it is null).
const Json& ExpectFirstChoice(const Json& j, int index, const std::string& text,
                              const Json& finish_reason) {
  ExpectEnvelope(j);
  const Json& ch = j.at("choices")[0];
  EXPECT_EQ(ch.at("index"), index);
  EXPECT_EQ(ch.at("text"), text);
  EXPECT_TRUE(ch.at("logprobs").is_null());
  EXPECT_EQ(ch.at("finish_reason"), finish_reason);
  return ch;
}

TEST(MakeCompletionIdTest, IsCmplAndSixteenHexDigits) {
  EXPECT_EQ(MakeCompletionId(0), "cmpl-0000000000000000");
  EXPECT_EQ(MakeCompletionId(UINT64_MAX), "cmpl-ffffffffffffffff");
}

TEST(EncodeCompletionResponseTest, WritesEveryField) {
  const Json j = Json::parse(EncodeCompletionResponse(
      Meta(false), {Choice(0, " world", {995}, "length"), Choice(1, ".", {13}, "stop")},
      {2, 2}));
  ASSERT_EQ(j.at("choices").size(), 2u);
  const Json& ch = ExpectFirstChoice(j, 0, " world", "length");
  EXPECT_FALSE(ch.contains("token_ids"));  // only with return_token_ids
  EXPECT_FALSE(ch.contains("prompt_token_ids"));
  EXPECT_EQ(j.at("choices")[1].at("index"), 1);
  EXPECT_EQ(j.at("choices")[1].at("finish_reason"), "stop");
  EXPECT_EQ(j.at("usage").at("prompt_tokens"), 2);
  EXPECT_EQ(j.at("usage").at("completion_tokens"), 2);
  EXPECT_EQ(j.at("usage").at("total_tokens"), 4);
}

TEST(EncodeCompletionResponseTest, ReturnTokenIdsAddsBothIdLists) {
  const Json j = Json::parse(
      EncodeCompletionResponse(Meta(true), {Choice(0, " world!", {995, 0}, "length")}, {2, 2}));
  const Json& ch = j.at("choices")[0];
  EXPECT_EQ(ch.at("token_ids"), Json::array({995, 0}));
  EXPECT_EQ(ch.at("prompt_token_ids"), Json::array({15496, 11}));
}

TEST(EncodeCompletionResponseTest, LogprobsInTheCompletionsShape) {
  CompletionChoice c;
  c.text = " a b";
  c.finish_reason = "length";
  CompletionLogprobs lp;
  lp.tokens = {" a", " b"};
  lp.token_logprobs = {-0.5f, -INFINITY};
  lp.top_logprobs = {{{" a", -0.5f}, {" c", -1.25f}},
                     {{"\xef\xbf\xbd", -2.0f}, {"\xef\xbf\xbd", -3.0f}}};
  lp.text_offset = {0, 2};
  c.logprobs = lp;
  const Json j = Json::parse(EncodeCompletionResponse(Meta(false), {c}, {1, 2}));
  const Json& l = j.at("choices")[0].at("logprobs");
  EXPECT_EQ(l.at("tokens"), Json::array({" a", " b"}));
  EXPECT_EQ(l.at("token_logprobs")[0], -0.5);
  EXPECT_EQ(l.at("token_logprobs")[1], -9999.0);  // -inf, as vLLM writes it
  ASSERT_EQ(l.at("top_logprobs").size(), 2u);
  EXPECT_EQ(l.at("top_logprobs")[0], Json({{" a", -0.5}, {" c", -1.25}}));
  // Two tokens with the same text: the more likely one stays.
  EXPECT_EQ(l.at("top_logprobs")[1], Json({{"\xef\xbf\xbd", -2.0}}));
  EXPECT_EQ(l.at("text_offset"), Json::array({0, 2}));
}

TEST(EncodeCompletionResponseTest, InvalidUtf8IsReplacedNotThrown) {
  CompletionChoice c;
  c.text = "a\xc3";  // a cut two-byte sequence
  const Json j = Json::parse(EncodeCompletionResponse(Meta(false), {c}, {1, 1}));
  EXPECT_EQ(j.at("choices")[0].at("text"), "a\xef\xbf\xbd");
  EXPECT_TRUE(j.at("choices")[0].at("finish_reason").is_null());
}

TEST(EncodeCompletionChunkTest, OneChoicesNewTextWithNullFinishAndUsage) {
  const Json j = EventJson(
      EncodeCompletionChunk(Meta(true), Choice(2, " wor", {995}, ""), /*first_of_choice=*/true));
  ASSERT_EQ(j.at("choices").size(), 1u);
  const Json& ch = ExpectFirstChoice(j, 2, " wor", nullptr);
  EXPECT_EQ(ch.at("token_ids"), Json::array({995}));
  EXPECT_EQ(ch.at("prompt_token_ids"), Json::array({15496, 11}));
  EXPECT_TRUE(j.at("usage").is_null());
}

TEST(EncodeCompletionChunkTest, PromptIdsOnlyOnTheFirstChunkAndFinishOnTheLast) {
  const Json j =
      EventJson(EncodeCompletionChunk(Meta(true), Choice(0, "ld", {}, "stop"), false));
  const Json& ch = j.at("choices")[0];
  EXPECT_FALSE(ch.contains("prompt_token_ids"));
  EXPECT_EQ(ch.at("token_ids"), Json::array());
  EXPECT_EQ(ch.at("finish_reason"), "stop");
}

TEST(EncodeUsageChunkTest, EmptyChoicesAndTheUsage) {
  const Json j = EventJson(EncodeUsageChunk(Meta(false), {5, 7}));
  ExpectEnvelope(j);
  EXPECT_EQ(j.at("choices"), Json::array());
  EXPECT_EQ(j.at("usage"), Json({{"prompt_tokens", 5}, {"completion_tokens", 7},
                                 {"total_tokens", 12}}));
}

TEST(EncodeDoneEventTest, IsTheSseDoneLine) { EXPECT_EQ(EncodeDoneEvent(), "data: [DONE]\n\n"); }

TEST(EncodeOpenAiErrorTest, StatusCodeMapping) {
  struct Case {
    absl::StatusCode code;
    int http;
    const char* type;
  };
  for (const Case& c : {Case{absl::StatusCode::kInvalidArgument, 400, "BadRequestError"},
                        Case{absl::StatusCode::kOutOfRange, 400, "BadRequestError"},
                        Case{absl::StatusCode::kUnauthenticated, 401, "AuthenticationError"},
                        Case{absl::StatusCode::kPermissionDenied, 403, "PermissionDeniedError"},
                        Case{absl::StatusCode::kNotFound, 404, "NotFoundError"},
                        Case{absl::StatusCode::kResourceExhausted, 429, "RateLimitError"},
                        Case{absl::StatusCode::kUnavailable, 503, "ServiceUnavailableError"},
                        Case{absl::StatusCode::kDeadlineExceeded, 504, "GatewayTimeoutError"},
                        Case{absl::StatusCode::kInternal, 500, "InternalServerError"},
                        Case{absl::StatusCode::kFailedPrecondition, 400, "BadRequestError"},
                        Case{absl::StatusCode::kUnknown, 500, "InternalServerError"}}) {
    const OpenAiError e = EncodeOpenAiError(absl::Status(c.code, "boom"));
    EXPECT_EQ(e.http_status, c.http) << absl::StatusCodeToString(c.code);
    const Json j = Json::parse(e.body);
    EXPECT_EQ(j.size(), 1u);
    const Json& err = j.at("error");
    EXPECT_EQ(err.at("message"), "boom");
    EXPECT_EQ(err.at("type"), c.type);
    EXPECT_TRUE(err.at("param").is_null());
    EXPECT_EQ(err.at("code"), c.http);
  }
}

TEST(EncodeOpenAiErrorTest, ParamIsTheFieldTheMessageNames) {
  struct Case {
    const char* message;
    Json param;
  };
  for (const Case& c : {Case{"top_p must be in (0, 1], got 2", "top_p"},
                        Case{"top_p 2 must be in (0, 1]", "top_p"},  // CheckTopP's
                        Case{"top_k -2 must be >= -1 (0 and -1 turn it off)", "top_k"},
                        Case{"stop[1] must not be empty", "stop"},
                        Case{"stop_token_ids[0] must be an integer, got \"a\"", "stop_token_ids"},
                        Case{"stream_options.include_usage must be true or false, got 1",
                             "stream_options"},
                        Case{"n must be in [1, 16], got 0", "n"},
                        Case{"missing field 'model'", "model"},
                        Case{"model 'x' is not served", "model"},  // NotFound names it
                        // The generator's refusals carry the model first.
                        Case{"model 'x': prompt (2 tokens) + max_tokens (63) = 65 exceeds",
                             "prompt"},
                        Case{"model 'x': the generation queue is full", nullptr},
                        Case{"model 'x' has no tokenizer here: send ids", "model"},
                        Case{"nothing to see", nullptr},
                        Case{"temperatures are high", nullptr}}) {
    const Json j = Json::parse(EncodeOpenAiError(absl::InvalidArgumentError(c.message)).body);
    EXPECT_EQ(j.at("error").at("param"), c.param) << c.message;
  }
}

TEST(EncodeOpenAiErrorTest, GivenHttpStatusIsTheCodeAndPicksTheType) {
  const OpenAiError e = EncodeOpenAiError(absl::ResourceExhaustedError("body too big"), 413);
  EXPECT_EQ(e.http_status, 413);
  const Json j = Json::parse(e.body);
  EXPECT_EQ(j.at("error").at("code"), 413);
  EXPECT_EQ(j.at("error").at("type"), "APIError");
  EXPECT_EQ(OpenAiErrorType(409), "ConflictError");
  EXPECT_EQ(OpenAiErrorType(502), "InternalServerError");
}

TEST(EncodeOpenAiErrorTest, OkStatusIsAnInternalError) {
  const OpenAiError e = EncodeOpenAiError(absl::OkStatus());
  EXPECT_EQ(e.http_status, 500);
  EXPECT_EQ(Json::parse(e.body).at("error").at("type"), "InternalServerError");
}

TEST(EncodeErrorEventTest, IsOneSseEventWithTheErrorBody) {
  const Json j = EventJson(EncodeErrorEvent(absl::UnavailableError("worker lost")));
  EXPECT_EQ(j.at("error").at("message"), "worker lost");
  EXPECT_EQ(j.at("error").at("code"), 503);
}

TEST(EncodeModelListTest, ListsEachModelInOrder) {
  const Json j = Json::parse(EncodeModelList({"gpt2", "llama"}, 1700000001));
  EXPECT_EQ(j.at("object"), "list");
  ASSERT_EQ(j.at("data").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Json& m = j.at("data")[i];
    EXPECT_EQ(m.at("id"), i == 0 ? "gpt2" : "llama");
    EXPECT_EQ(m.at("object"), "model");
    EXPECT_EQ(m.at("created"), 1700000001);
    EXPECT_EQ(m.at("owned_by"), "meshserve");
  }
  EXPECT_EQ(Json::parse(EncodeModelList({}, 0)).at("data"), Json::array());
}

}  // namespace
}  // namespace meshserve
