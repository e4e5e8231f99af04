// Tests of the /v1/completions request decoder: every field's defaults,
// accepted forms and refusals (with the exact messages), the body-level
// refusals, and the model-dependent checks of ValidateForModel.
#include "server/coordinator/http/openai_request.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// {"model": "m", "prompt": "hi", <extra>}.
std::string Body(const std::string& extra) {
  return absl::StrCat(R"({"model": "m", "prompt": "hi")", extra.empty() ? "" : ", ", extra,
                      "}");
}
// {"model": "m", "prompt": <prompt>}.
std::string WithPrompt(const std::string& prompt) {
  return absl::StrCat(R"({"model": "m", "prompt": )", prompt, "}");
}

TEST(ParseCompletionRequestTest, DefaultsAreOpenAis) {
  ASSERT_OK_AND_ASSIGN(CompletionRequest r, ParseCompletionRequest(Body("")));
  EXPECT_EQ(r.model, "m");
  ASSERT_TRUE(r.has_text_prompt());
  EXPECT_EQ(r.prompt_text(), "hi");
  EXPECT_EQ(r.stop.max_tokens, 16);
  EXPECT_THAT(r.stop.stop_token_ids, IsEmpty());
  EXPECT_FALSE(r.stop.ignore_eos);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.num_logprobs, -1);
  EXPECT_FALSE(r.has_seed);
  EXPECT_THAT(r.stop_strings, IsEmpty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.return_token_ids);
  EXPECT_EQ(r.logprobs, -1);
}

TEST(ParseCompletionRequestTest, ReadsEveryField) {
  ASSERT_OK_AND_ASSIGN(
      CompletionRequest r,
      ParseCompletionRequest(Body(
          R"("max_tokens": 7, "temperature": 0.25, "top_p": 0.5, "top_k": 40, "seed": 99,
             "stop": ["\n", "."], "stop_token_ids": [50256, 0], "ignore_eos": true,
             "stream": true, "stream_options": {"include_usage": true}, "logprobs": 5,
             "n": 3, "best_of": 3, "return_token_ids": true, "echo": false,
             "suffix": null, "presence_penalty": 0, "frequency_penalty": 0.0,
             "logit_bias": {}, "user": "alice")")));
  EXPECT_EQ(r.stop.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.25f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, 99u);
  EXPECT_THAT(r.stop_strings, ElementsAre("\n", "."));
  EXPECT_THAT(r.stop.stop_token_ids, ElementsAre(50256, 0));
  EXPECT_TRUE(r.stop.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_EQ(r.sampling.num_logprobs, 5);
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.return_token_ids);
}

TEST(ParseCompletionRequestTest, AcceptsEveryPromptForm) {
  ASSERT_OK_AND_ASSIGN(CompletionRequest text, ParseCompletionRequest(WithPrompt(R"("a b")")));
  EXPECT_EQ(text.prompt_text(), "a b");
  ASSERT_OK_AND_ASSIGN(CompletionRequest ids, ParseCompletionRequest(WithPrompt("[1, 0, 7]")));
  ASSERT_FALSE(ids.has_text_prompt());
  EXPECT_THAT(ids.prompt_ids(), ElementsAre(1, 0, 7));
  ASSERT_OK_AND_ASSIGN(CompletionRequest one_text,
                       ParseCompletionRequest(WithPrompt(R"(["a b"])")));
  EXPECT_EQ(one_text.prompt_text(), "a b");
  ASSERT_OK_AND_ASSIGN(CompletionRequest one_ids,
                       ParseCompletionRequest(WithPrompt("[[3, 4]]")));
  EXPECT_THAT(one_ids.prompt_ids(), ElementsAre(3, 4));
  // Integral floats are integers (pydantic's lax ints), also in id lists.
  ASSERT_OK_AND_ASSIGN(CompletionRequest floats, ParseCompletionRequest(WithPrompt("[5.0]")));
  EXPECT_THAT(floats.prompt_ids(), ElementsAre(5));
}

TEST(ParseCompletionRequestTest, NullMeansAbsentAndUnknownFieldsAreIgnored) {
  ASSERT_OK_AND_ASSIGN(
      CompletionRequest r,
      ParseCompletionRequest(Body(
          R"("max_tokens": null, "temperature": null, "top_p": null, "top_k": null,
             "seed": null, "stop": null, "stop_token_ids": null, "stream": null,
             "stream_options": null, "logprobs": null, "n": null, "best_of": null,
             "echo": null, "suffix": null, "logit_bias": null, "user": null,
             "min_p": 0.1, "repetition_penalty": 1.1, "metadata": {"x": [1]})")));
  EXPECT_EQ(r.stop.max_tokens, 16);
  EXPECT_FALSE(r.has_seed);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
}

TEST(ParseCompletionRequestTest, TopKMinusOneIsOff) {
  ASSERT_OK_AND_ASSIGN(CompletionRequest r, ParseCompletionRequest(Body(R"("top_k": -1)")));
  EXPECT_EQ(r.sampling.top_k, 0);
}

TEST(ParseCompletionRequestTest, SeedKeepsAll64Bits) {
  ASSERT_OK_AND_ASSIGN(CompletionRequest neg, ParseCompletionRequest(Body(R"("seed": -1)")));
  EXPECT_TRUE(neg.has_seed);
  EXPECT_EQ(neg.sampling.seed, UINT64_MAX);
  ASSERT_OK_AND_ASSIGN(CompletionRequest max,
                       ParseCompletionRequest(Body(R"("seed": 18446744073709551615)")));
  EXPECT_EQ(max.sampling.seed, UINT64_MAX);
  ASSERT_OK_AND_ASSIGN(CompletionRequest zero, ParseCompletionRequest(Body(R"("seed": 0)")));
  EXPECT_TRUE(zero.has_seed);
  EXPECT_EQ(zero.sampling.seed, 0u);
}

TEST(ParseCompletionRequestTest, EdgesOfTheRangesAreAccepted) {
  for (const char* extra :
       {R"("max_tokens": 1)", R"("temperature": 0)", R"("top_p": 1)", R"("top_p": 1e-30)",
        R"("top_k": 1)", R"("top_k": 2147483647)", R"("logprobs": 0)", R"("logprobs": 20)",
        R"("n": 16)", R"("stop": ["a", "b", "c", "d"])", R"("stop": "x")",
        R"("stream_options": {}, "stream": true)", R"("suffix": "")",
        R"("stop_token_ids": [])"}) {
    EXPECT_TRUE(ParseCompletionRequest(Body(extra)).ok()) << extra;
  }
  ASSERT_OK_AND_ASSIGN(CompletionRequest tiny,
                       ParseCompletionRequest(Body(R"("top_p": 1e-60)")));
  EXPECT_GT(tiny.sampling.top_p, 0.0f);  // rounds to float, never to 0
}

struct Refusal {
  std::string body;
  std::string message;
};

class RefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusalTest, IsInvalidArgumentWithTheExactMessage) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(GetParam().body);
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << GetParam().body;
  EXPECT_EQ(r.status().message(), GetParam().message) << GetParam().body;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, RefusalTest,
    ::testing::Values(
        Refusal{R"({"prompt": "hi"})", "missing field 'model'"},
        Refusal{R"({"model": 3, "prompt": "hi"})", "model must be a string, got 3"},
        Refusal{R"({"model": "", "prompt": "hi"})", "model must not be empty"},
        Refusal{R"({"model": "m"})", "missing field 'prompt'"},
        Refusal{Body(R"("max_tokens": 0)"), "max_tokens must be >= 1, got 0"},
        Refusal{Body(R"("max_tokens": -5)"), "max_tokens must be >= 1, got -5"},
        Refusal{Body(R"("max_tokens": "3")"), "max_tokens must be an integer, got \"3\""},
        Refusal{Body(R"("max_tokens": 1.5)"), "max_tokens must be an integer, got 1.5"},
        Refusal{Body(R"("max_tokens": true)"), "max_tokens must be an integer, got true"},
        Refusal{Body(R"("temperature": -0.5)"), "temperature -0.5 must be finite and >= 0"},
        Refusal{Body(R"("temperature": "hot")"), "temperature must be a number, got \"hot\""},
        Refusal{Body(R"("temperature": 1e39)"),
                "temperature 1e+39 must be finite and >= 0"},
        Refusal{Body(R"("top_p": 0)"), "top_p 0 must be in (0, 1]"},
        Refusal{Body(R"("top_p": 1.5)"), "top_p 1.5 must be in (0, 1]"},
        Refusal{Body(R"("top_p": -0.1)"), "top_p -0.1 must be in (0, 1]"},
        Refusal{Body(R"("top_p": [1])"), "top_p must be a number, got [1]"},
        Refusal{Body(R"("top_k": -2)"), "top_k -2 must be >= -1 (0 and -1 turn it off)"},
        Refusal{Body(R"("top_k": 2147483648)"),
                "top_k 2147483648 must be <= 2147483647"},
        Refusal{Body(R"("top_k": 2.5)"), "top_k must be an integer, got 2.5"},
        Refusal{Body(R"("seed": "7")"), "seed must be an integer, got \"7\""},
        Refusal{Body(R"("seed": 0.5)"), "seed must be an integer, got 0.5"},
        Refusal{Body(R"("logprobs": 21)"), "logprobs 21 must be in [0, 20]"},
        Refusal{Body(R"("logprobs": -1)"), "logprobs -1 must be in [0, 20]"},
        Refusal{Body(R"("logprobs": true)"), "logprobs must be an integer, got true"}));

INSTANTIATE_TEST_SUITE_P(
    StopAndStream, RefusalTest,
    ::testing::Values(
        Refusal{Body(R"("stop": 3)"), "stop must be a string or a list of strings, got 3"},
        Refusal{Body(R"("stop": ["a", 3])"), "stop must be a list of strings, got 3 in [\"a\",3]"},
        Refusal{Body(R"("stop": ["a", "b", "c", "d", "e"])"),
                "stop must hold at most 4 strings, got 5"},
        Refusal{Body(R"("stop": "")"), "stop must not be an empty string"},
        Refusal{Body(R"("stop": ["a", ""])"), "stop[1] must not be empty"},
        Refusal{Body(R"("stop_token_ids": [1, -2])"),
                "stop_token_ids[1] must be a token id >= 0, got -2"},
        Refusal{Body(R"("stop_token_ids": 5)"),
                "stop_token_ids must be a list of token ids, got 5"},
        Refusal{Body(R"("stop_token_ids": ["a"])"),
                "stop_token_ids[0] must be an integer, got \"a\""},
        Refusal{Body(R"("ignore_eos": "yes")"), "ignore_eos must be true or false, got \"yes\""},
        Refusal{Body(R"("stream": 1)"), "stream must be true or false, got 1"},
        Refusal{Body(R"("stream_options": {"include_usage": true})"),
                "stream_options is only allowed when stream is true, got "
                "{\"include_usage\":true}"},
        Refusal{Body(R"("stream": true, "stream_options": 3)"),
                "stream_options must be an object, got 3"},
        Refusal{Body(R"("stream": true, "stream_options": {"include_usage": "x"})"),
                "stream_options.include_usage must be true or false, got \"x\""},
        Refusal{Body(R"("return_token_ids": "1")"),
                "return_token_ids must be true or false, got \"1\""},
        Refusal{Body(R"("n": 0)"), "n must be in [1, 16], got 0"},
        Refusal{Body(R"("n": 17)"), "n must be in [1, 16], got 17"},
        Refusal{Body(R"("n": "2")"), "n must be an integer, got \"2\""},
        Refusal{Body(R"("best_of": 3)"),
                "best_of must equal n (1): ranking several samples is not supported, got 3"},
        Refusal{Body(R"("n": 2, "best_of": 1)"),
                "best_of must equal n (2): ranking several samples is not supported, got 1"}));

INSTANTIATE_TEST_SUITE_P(
    Unsupported, RefusalTest,
    ::testing::Values(
        Refusal{Body(R"("echo": true)"), "echo is not supported, got true"},
        Refusal{Body(R"("echo": 1)"), "echo must be true or false, got 1"},
        Refusal{Body(R"("suffix": "x")"), "suffix is not supported, got \"x\""},
        Refusal{Body(R"("suffix": 3)"), "suffix must be a string, got 3"},
        Refusal{Body(R"("presence_penalty": 0.5)"),
                "presence_penalty is not supported (only 0), got 0.5"},
        Refusal{Body(R"("frequency_penalty": -1)"),
                "frequency_penalty is not supported (only 0), got -1"},
        Refusal{Body(R"("frequency_penalty": "0")"),
                "frequency_penalty must be a number, got \"0\""},
        Refusal{Body(R"("logit_bias": {"50256": -100})"),
                "logit_bias is not supported, got {\"50256\":-100}"},
        Refusal{Body(R"("logit_bias": [1])"), "logit_bias must be an object, got [1]"}));

INSTANTIATE_TEST_SUITE_P(
    Prompt, RefusalTest,
    ::testing::Values(
        Refusal{WithPrompt(R"("")"), "prompt must not be empty"},
        Refusal{WithPrompt("[]"), "prompt must not be empty, got []"},
        Refusal{WithPrompt("[[]]"), "prompt[0] must not be empty, got []"},
        Refusal{WithPrompt(R"([""])"), "prompt[0] must not be empty"},
        Refusal{WithPrompt(R"(["a", "b"])"),
                "prompt holds 2 prompts: batched prompts are not supported; use n for "
                "several samples of one prompt, or separate requests"},
        Refusal{WithPrompt("[[1], [2], [3]]"),
                "prompt holds 3 prompts: batched prompts are not supported; use n for "
                "several samples of one prompt, or separate requests"},
        Refusal{WithPrompt("[1, -1]"), "prompt[1] must be a token id >= 0, got -1"},
        Refusal{WithPrompt(R"([1, "a"])"), "prompt[1] must be an integer, got \"a\""},
        Refusal{WithPrompt("[1.5]"), "prompt[0] must be an integer, got 1.5"},
        Refusal{WithPrompt(R"([[1, "x"]])"), "prompt[0][1] must be an integer, got \"x\""},
        Refusal{WithPrompt("[[[1]]]"), "prompt[0][0] must be an integer, got [1]"},
        Refusal{WithPrompt("3"), "prompt must be a string or a list of token ids, got 3"},
        Refusal{WithPrompt(R"({"a": 1})"),
                "prompt must be a string or a list of token ids, got {\"a\":1}"},
        Refusal{WithPrompt("[9223372036854775808]"),
                "prompt[0] must be an integer, got 9223372036854775808"}));

INSTANTIATE_TEST_SUITE_P(
    Body, RefusalTest,
    ::testing::Values(Refusal{"[1, 2]", "request body must be a JSON object, got [1,2]"},
                      Refusal{"\"x\"", "request body must be a JSON object, got \"x\""},
                      Refusal{"null", "request body must be a JSON object, got null"}));

TEST(ParseCompletionRequestTest, RefusesTextThatIsNotJson) {
  for (const char* body : {"", "not json", "{\"model\": ", "{} trailing", "\xff\xfe{}"}) {
    absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << body;
    EXPECT_THAT(std::string(r.status().message()),
                StartsWith("request body is not valid JSON: "))
        << body;
  }
}

TEST(ParseCompletionRequestTest, RefusesDeepNestingBeforeParsing) {
  const std::string deep = Body(absl::StrCat(R"("user": )", std::string(100000, '['),
                                             std::string(100000, ']')));
  EXPECT_THAT(ParseCompletionRequest(deep),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "request body nests deeper than 32 levels"));
  // Brackets inside strings do not count.
  const std::string in_string = Body(absl::StrCat(R"("user": ")", std::string(100, '['),
                                                  R"(\"")"));
  EXPECT_TRUE(ParseCompletionRequest(in_string).ok());
  // 32 levels are fine.
  std::string ok_depth = Body(absl::StrCat(R"("user": )", std::string(31, '['),
                                           std::string(31, ']')));
  EXPECT_TRUE(ParseCompletionRequest(ok_depth).ok());
}

TEST(ParseCompletionRequestTest, InvalidUtf8InAValueIsRefusedNotThrown) {
  const std::string body = "{\"model\": \"m\", \"prompt\": \"a\xc3\"}";
  EXPECT_THAT(ParseCompletionRequest(body), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ValidateForModel.

CompletionRequest Parsed(const std::string& body) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CompletionRequest{};
}

TEST(ValidateForModelTest, AcceptsAPromptThatFits) {
  const ModelLimits limits{50257, 1024, true};
  EXPECT_OK(ValidateForModel(Parsed(Body(R"("max_tokens": 1022)")), limits, 2));
  EXPECT_OK(ValidateForModel(Parsed(WithPrompt("[0, 50256]")), limits, 2));
}

TEST(ValidateForModelTest, RefusesAPromptPastTheContextNamingTheNumbers) {
  const ModelLimits limits{50257, 1024, true};
  EXPECT_THAT(ValidateForModel(Parsed(Body(R"("max_tokens": 2000)")), limits, 120),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt (120 tokens) + max_tokens (2000) = 2120 exceeds the model's "
                       "context of 1024"));
  EXPECT_THAT(ValidateForModel(Parsed(Body(R"("max_tokens": 1023)")), limits, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, "= 1025 exceeds"));
  // No overflow with the largest max_tokens.
  EXPECT_THAT(
      ValidateForModel(Parsed(Body(R"("max_tokens": 9223372036854775807)")), limits, 5),
      StatusIs(absl::StatusCode::kInvalidArgument, "= 9223372036854775812 exceeds"));
}

TEST(ValidateForModelTest, RefusesIdsOutsideTheVocabulary) {
  const ModelLimits limits{50257, 1024, false};
  EXPECT_THAT(ValidateForModel(Parsed(WithPrompt("[1, 2, 3, 50257]")), limits, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt token id 50257 (at 3) is outside the vocabulary [0, 50257) "
                       "of model 'm'"));
}

TEST(ValidateForModelTest, RefusesTextWithoutATokenizer) {
  EXPECT_THAT(ValidateForModel(Parsed(Body("")), ModelLimits{100, 1024, false}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt is text but model 'm' has no tokenizer: send the prompt as a "
                       "list of token ids"));
}

TEST(ValidateForModelTest, RefusesATextThatTokenizesToNothing) {
  EXPECT_THAT(ValidateForModel(Parsed(Body("")), ModelLimits{100, 1024, true}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "prompt is empty after tokenization"));
}

TEST(ToGenerateRequestTest, CarriesPromptSamplingAndStopWithSeedPlusChoice) {
  const CompletionRequest r = Parsed(R"({"model": "lm", "prompt": [5, 6], "max_tokens": 7,
      "temperature": 0.5, "top_k": 3, "top_p": 0.9, "seed": 18446744073709551615,
      "stop_token_ids": [9], "ignore_eos": true, "logprobs": 2, "n": 3})");
  for (int32_t i = 0; i < 3; ++i) {
    const GenerationRequest g = ToGenerateRequest(r, i);
    EXPECT_EQ(g.model, "lm");
    EXPECT_FALSE(g.prompt_text.has_value());
    EXPECT_THAT(g.prompt_ids, ElementsAre(5, 6));
    EXPECT_EQ(g.sampling.temperature, 0.5f);
    EXPECT_EQ(g.sampling.top_k, 3);
    EXPECT_EQ(g.sampling.top_p, 0.9f);
    EXPECT_EQ(g.sampling.num_logprobs, 2);
    EXPECT_TRUE(g.has_seed);
    // 2^64 - 1 + i wraps: choices 1 and 2 run with seeds 0 and 1.
    EXPECT_EQ(g.sampling.seed, i == 0 ? 18446744073709551615ull : uint64_t(i - 1));
    EXPECT_EQ(g.stop.max_tokens, 7);
    EXPECT_THAT(g.stop.stop_token_ids, ElementsAre(9));
    EXPECT_TRUE(g.stop.ignore_eos);
  }
}

TEST(ToGenerateRequestTest, TextPromptAndNoSeed) {
  const GenerationRequest g = ToGenerateRequest(Parsed(Body("")), 1);
  ASSERT_TRUE(g.prompt_text.has_value());
  EXPECT_THAT(g.prompt_ids, IsEmpty());
  EXPECT_FALSE(g.has_seed);  // the generator draws one per sequence
}

}  // namespace
}  // namespace meshserve
