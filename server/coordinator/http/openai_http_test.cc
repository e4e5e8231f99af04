// The OpenAI routes end to end: real HTTP requests (cpp-httplib's client, or
// a raw socket) to the coordinator's real HTTP server, whose Generator runs
// over fake workers; every completion is checked against the fake model's
// reference tokens (server/coordinator/generate/testing/fake_steps.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "common/tokenizer/utf8.h"
#include "server/coordinator/generate/testing/char_tokenizer.h"
#include "server/coordinator/http/testing/openai_test_server.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using Json = nlohmann::json;
using ::meshserve::testing::OpenAiTestServer;
using ::meshserve::testing::OpenAiTestServerOptions;
// The fake model's tokens for a prompt (fake_steps.h).
using ::meshserve::testing::kVocab;
using ::meshserve::testing::Reference;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Answer {
  int status = 0;
  std::string content_type;
  std::string body;
};

Answer Post(int port, const std::string& path, const std::string& body,
            const std::string& token = "") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result r = client.Post(path.c_str(), headers, body, "application/json");
  if (!r) return Answer{-1, "", absl::StrCat("no answer: ", httplib::to_string(r.error()))};
  return Answer{r->status, r->get_header_value("Content-Type"), r->body};
}

Answer Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result r = client.Get(path.c_str());
  if (!r) return Answer{-1, "", "no answer"};
  return Answer{r->status, r->get_header_value("Content-Type"), r->body};
}

// The `data:` payloads of an SSE body, in order (comments skipped).
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::StartsWith(event, ":")) continue;
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    out.emplace_back(event.substr(6));
  }
  return out;
}

std::vector<int64_t> Ids(const Json& list) { return list.get<std::vector<int64_t>>(); }

void ExpectOpenAiError(const Answer& a, int status, const std::string& type,
                       const std::string& message, const Json& param) {
  EXPECT_EQ(a.status, status) << a.body;
  EXPECT_THAT(a.content_type, StartsWith("application/json"));
  const Json j = Json::parse(a.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << a.body;
  const Json& e = j.at("error");
  EXPECT_EQ(e.at("type"), type) << a.body;
  EXPECT_EQ(e.at("code"), status) << a.body;
  EXPECT_THAT(e.at("message").get<std::string>(), HasSubstr(message));
  EXPECT_EQ(e.at("param"), param) << a.body;
}

class OpenAiHttpTest : public ::testing::Test {
 protected:
  void Start(OpenAiTestServerOptions options = {}) {
    options.scratch_dir = ::testing::TempDir();
    ASSERT_OK_AND_ASSIGN(server_, OpenAiTestServer::Start(options));
    port_ = server_->port();
  }
  void SetUp() override { Start(); }

  std::unique_ptr<OpenAiTestServer> server_;
  int port_ = 0;
};

TEST_F(OpenAiHttpTest, WholeCompletionIsTheReference) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [1, 2, 3], "max_tokens": 8,
                            "return_token_ids": true})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_THAT(a.content_type, StartsWith("application/json"));
  const Json j = Json::parse(a.body);
  EXPECT_THAT(j.at("id").get<std::string>(), StartsWith("cmpl-"));
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("model"), "lm");
  EXPECT_EQ(j.at("system_fingerprint"), "v7");  // the fake's weight version
  ASSERT_EQ(j.at("choices").size(), 1u);
  const Json& c = j.at("choices")[0];
  EXPECT_EQ(c.at("index"), 0);
  EXPECT_THAT(Ids(c.at("token_ids")), ElementsAreArray(Reference({1, 2, 3}, 8, {})));
  EXPECT_THAT(Ids(c.at("prompt_token_ids")), ElementsAreArray({1, 2, 3}));
  EXPECT_EQ(c.at("text"), "");  // no tokenizer wired
  EXPECT_TRUE(c.at("logprobs").is_null());
  EXPECT_EQ(c.at("finish_reason"), "length");
  EXPECT_EQ(j.at("usage"), Json::parse(R"({"prompt_tokens": 3, "completion_tokens": 8,
                                            "total_tokens": 11})"));
}

TEST_F(OpenAiHttpTest, StopTokenIdEndsTheChoiceWithStop) {
  const std::vector<int64_t> ref = Reference({4, 5}, 10, {});
  const Answer a = Post(port_, "/v1/completions",
                        absl::StrCat(R"({"model": "lm", "prompt": [4, 5], "max_tokens": 10,
                                         "return_token_ids": true, "stop_token_ids": [)",
                                     ref[3], "]}"));
  ASSERT_EQ(a.status, 200) << a.body;
  const Json c = Json::parse(a.body).at("choices")[0];
  EXPECT_THAT(Ids(c.at("token_ids")), ElementsAreArray(Reference({4, 5}, 10, {ref[3]})));
  EXPECT_EQ(c.at("finish_reason"), "stop");
}

TEST_F(OpenAiHttpTest, StreamChunksConcatenateToTheReferenceThenUsageThenDone) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [9, 8], "max_tokens": 12, "stream": true,
                            "return_token_ids": true,
                            "stream_options": {"include_usage": true}})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_THAT(a.content_type, StartsWith("text/event-stream"));
  const std::vector<std::string> data = SseData(a.body);
  ASSERT_GE(data.size(), 3u) << a.body;
  EXPECT_EQ(data.back(), "[DONE]");
  std::vector<int64_t> ids;
  std::string id;
  for (size_t i = 0; i + 2 < data.size(); ++i) {  // the choice chunks
    const Json j = Json::parse(data[i]);
    if (i == 0) id = j.at("id");
    EXPECT_EQ(j.at("id"), id);  // one completion
    EXPECT_EQ(j.at("system_fingerprint"), "v7");
    EXPECT_TRUE(j.at("usage").is_null());
    ASSERT_EQ(j.at("choices").size(), 1u);
    const Json& c = j.at("choices")[0];
    EXPECT_EQ(c.at("index"), 0);
    EXPECT_EQ(c.contains("prompt_token_ids"), i == 0) << data[i];
    const std::vector<int64_t> more = Ids(c.at("token_ids"));
    ids.insert(ids.end(), more.begin(), more.end());
    const bool last = i + 3 == data.size();
    EXPECT_EQ(c.at("finish_reason"), last ? Json("length") : Json(nullptr)) << data[i];
  }
  EXPECT_THAT(ids, ElementsAreArray(Reference({9, 8}, 12, {})));
  const Json usage = Json::parse(data[data.size() - 2]);
  EXPECT_EQ(usage.at("choices"), Json::array());
  EXPECT_EQ(usage.at("usage"), Json::parse(R"({"prompt_tokens": 2, "completion_tokens": 12,
                                                "total_tokens": 14})"));
}

TEST_F(OpenAiHttpTest, StreamWithoutIncludeUsageEndsWithDone) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [3], "max_tokens": 4, "stream": true})");
  ASSERT_EQ(a.status, 200) << a.body;
  const std::vector<std::string> data = SseData(a.body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const Json j = Json::parse(data[i]);
    EXPECT_EQ(j.at("choices").size(), 1u) << data[i];  // no usage chunk
    EXPECT_FALSE(j.at("choices")[0].contains("token_ids"));  // not asked
  }
}

// The streamed ids of choice 0 of an SSE body.
std::vector<int64_t> StreamedIds(const std::string& body) {
  std::vector<int64_t> ids;
  for (const std::string& d : SseData(body)) {
    if (d == "[DONE]") break;
    const Json c = Json::parse(d).at("choices")[0];
    const std::vector<int64_t> more = Ids(c.at("token_ids"));
    ids.insert(ids.end(), more.begin(), more.end());
  }
  return ids;
}

TEST_F(OpenAiHttpTest, ConcurrentStreamsEachGetTheirOwnReference) {
  constexpr int kStreams = 8;
  std::vector<Answer> answers(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      answers[i] = Post(port_, "/v1/completions",
                        absl::StrCat(R"({"model": "lm", "prompt": [)", i, ", ", i + 1,
                                     R"(], "max_tokens": 20, "stream": true,
                                        "return_token_ids": true})"));
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_EQ(answers[i].status, 200) << answers[i].body;
    EXPECT_THAT(StreamedIds(answers[i].body), ElementsAreArray(Reference({i, i + 1}, 20, {})))
        << "stream " << i;
  }
}

TEST_F(OpenAiHttpTest, TwoChoicesWithSeedsSeedAndSeedPlusOne) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [1, 1], "max_tokens": 5, "n": 2,
                            "seed": 42, "return_token_ids": true})");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json j = Json::parse(a.body);
  ASSERT_EQ(j.at("choices").size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j.at("choices")[i].at("index"), i);
    // The fake model samples no randomness: both choices are the reference.
    EXPECT_THAT(Ids(j.at("choices")[i].at("token_ids")),
                ElementsAreArray(Reference({1, 1}, 5, {})));
  }
  EXPECT_EQ(j.at("usage").at("prompt_tokens"), 2);
  EXPECT_EQ(j.at("usage").at("completion_tokens"), 10);
  const std::vector<SequenceId> seqs = server_->backend().WaitSeen(2, absl::Seconds(30));
  ASSERT_EQ(seqs.size(), 2u);
  std::vector<uint64_t> seeds = {server_->backend().SeedOf(seqs[0]),
                                 server_->backend().SeedOf(seqs[1])};
  std::sort(seeds.begin(), seeds.end());
  EXPECT_THAT(seeds, ElementsAreArray({42u, 43u}));
}

TEST_F(OpenAiHttpTest, ChoicesStartTogetherOnOneVersionWhileAPushLands) {
  OpenAiTestServerOptions options;
  options.backend.push_at_model_call = 2;  // the second look at the model sees version 8
  Start(options);
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [3, 1], "max_tokens": 4, "n": 2,
                            "return_token_ids": true})");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json j = Json::parse(a.body);
  // The n choices start as one group (Generator::StartGroup): one look at
  // the model, one version for all.
  EXPECT_EQ(j.at("system_fingerprint"), "v7");
  ASSERT_EQ(j.at("choices").size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(Ids(j.at("choices")[i].at("token_ids")),
                ElementsAreArray(Reference({3, 1}, 4, {})));
    EXPECT_EQ(j.at("choices")[i].at("finish_reason"), "length");
  }
  EXPECT_EQ(j.at("usage").at("completion_tokens"), 8);
  // The push landed: the next request runs on it.
  const Answer b = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [3, 1], "max_tokens": 1})");
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(Json::parse(b.body).at("system_fingerprint"), "v8");
}

TEST_F(OpenAiHttpTest, TwoChoicesStreamedEachToTheReference) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [6], "max_tokens": 6, "n": 2,
                            "stream": true, "return_token_ids": true,
                            "stream_options": {"include_usage": true}})");
  ASSERT_EQ(a.status, 200) << a.body;
  const std::vector<std::string> data = SseData(a.body);
  ASSERT_GE(data.size(), 3u);
  std::vector<int64_t> ids[2];
  int finished[2] = {0, 0};
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    const Json c = Json::parse(data[i]).at("choices")[0];
    const int index = c.at("index");
    ASSERT_TRUE(index == 0 || index == 1);
    const std::vector<int64_t> more = Ids(c.at("token_ids"));
    ids[index].insert(ids[index].end(), more.begin(), more.end());
    if (!c.at("finish_reason").is_null()) ++finished[index];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(ids[i], ElementsAreArray(Reference({6}, 6, {}))) << i;
    EXPECT_EQ(finished[i], 1);
  }
  EXPECT_EQ(Json::parse(data[data.size() - 2]).at("usage").at("completion_tokens"), 12);
}

TEST_F(OpenAiHttpTest, LogprobsAreTheSampledOnesWithIdsAsTokens) {
  const Answer a = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [2], "max_tokens": 3, "logprobs": 2})");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json lp = Json::parse(a.body).at("choices")[0].at("logprobs");
  const std::vector<int64_t> ref = Reference({2}, 3, {});
  ASSERT_EQ(lp.at("tokens").size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lp.at("tokens")[i], absl::StrCat(ref[i]));
    EXPECT_EQ(lp.at("token_logprobs")[i], -1.5);  // what the fake workers sample
    // The fake workers' top 2: the sampled token, then the next id.
    EXPECT_EQ(lp.at("top_logprobs")[i],
              Json({{absl::StrCat(ref[i]), -1.5}, {absl::StrCat((ref[i] + 1) % kVocab), -2.5}}));
    EXPECT_EQ(lp.at("text_offset")[i], 0);
  }
  // Streamed: the same lists, one entry per token in the chunks.
  const Answer s = Post(port_, "/v1/completions",
                        R"({"model": "lm", "prompt": [2], "max_tokens": 3, "logprobs": 2,
                            "stream": true})");
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<Json> tops;
  for (const std::string& data : SseData(s.body)) {
    if (data == "[DONE]") continue;
    const Json chunk = Json::parse(data);
    for (const Json& c : chunk.at("choices")) {
      for (const Json& t : c.at("logprobs").at("top_logprobs")) tops.push_back(t);
    }
  }
  ASSERT_EQ(tops.size(), 3u) << s.body;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tops[i],
              Json({{absl::StrCat(ref[i]), -1.5}, {absl::StrCat((ref[i] + 1) % kVocab), -2.5}}));
  }
}

// A stand-in tokenizer whose tokens split characters: an even id is the
// lead byte C3, an odd one the continuation byte A9 (C3 A9 is "é").
std::string HalfBytes(const std::string&, const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += id % 2 == 0 ? "\xC3" : "\xA9";
  return out;
}

TEST_F(OpenAiHttpTest, WithADetokenizerStreamedTextIsTheWholeTextAndTheBytesDecoded) {
  OpenAiTestServerOptions options;
  options.detokenize = HalfBytes;
  Start(options);
  const std::string request = R"({"model": "lm", "prompt": [7, 7], "max_tokens": 20)";
  const Answer whole = Post(port_, "/v1/completions", request + "}");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const std::string text = Json::parse(whole.body).at("choices")[0].at("text");
  EXPECT_EQ(text, tokenizer::DecodeUtf8Lossy(HalfBytes("lm", Reference({7, 7}, 20, {}))));
  const Answer streamed = Post(port_, "/v1/completions", request + R"(, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> data = SseData(streamed.body);
  std::string joined;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const std::string chunk = Json::parse(data[i]).at("choices")[0].at("text");
    EXPECT_OK(tokenizer::ValidateUtf8(chunk));
    joined += chunk;
  }
  EXPECT_EQ(joined, text);  // no chunk split a character, none was replaced twice
}

// A tokenizer of one character per id: id i is kChars[i] (the fake model's
// 50 ids), and text encodes back character by character.
constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ.,!?-0123456\n";
std::shared_ptr<testing::CharTokenizer> NewCharTokenizer() {
  return std::make_shared<testing::CharTokenizer>(testing::CharTokenizer::Alphabet(kChars));
}

std::string CharText(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += kChars[id];
  return out;
}

TEST_F(OpenAiHttpTest, StopStringsCutTheTextAndEndAtTheTokenThatCompletedThem) {
  OpenAiTestServerOptions options;
  options.backend.tokenizer = NewCharTokenizer();
  Start(options);
  const std::vector<int64_t> prompt = {7, 4, 11};
  const std::vector<int64_t> full = Reference(prompt, 40, {});
  const std::string full_text = CharText(full);
  // Two stops: three characters from position 20 and two from 12 (the
  // earliest occurrence of either wins).
  const std::string stop_a = full_text.substr(20, 3);
  const std::string stop_b = full_text.substr(12, 2);
  const size_t cut = std::min(full_text.find(stop_a), full_text.find(stop_b));
  const size_t end_a = full_text.find(stop_a) + stop_a.size();
  const size_t end_b = full_text.find(stop_b) + stop_b.size();
  const size_t num_ids = std::min(end_a, end_b);  // one character per token
  const std::vector<int64_t> want_ids(full.begin(), full.begin() + num_ids);
  const Json body = {{"model", "lm"},  {"prompt", prompt},         {"max_tokens", 40},
                     {"stop", Json::array({stop_a, stop_b})}, {"return_token_ids", true}};
  const Answer whole = Post(port_, "/v1/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json j = Json::parse(whole.body);
  const Json& c = j.at("choices")[0];
  EXPECT_EQ(c.at("text"), full_text.substr(0, cut));
  EXPECT_THAT(Ids(c.at("token_ids")), ElementsAreArray(want_ids));
  EXPECT_EQ(c.at("finish_reason"), "stop");
  EXPECT_EQ(j.at("usage").at("completion_tokens"), static_cast<int64_t>(num_ids));
  // Streamed: the chunks join to the same text; each chunk's ids are the
  // tokens' and its text never runs past what the whole answer kept.
  Json stream_body = body;
  stream_body["stream"] = true;
  stream_body["stream_options"] = {{"include_usage", true}};
  const Answer streamed = Post(port_, "/v1/completions", stream_body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<std::string> data = SseData(streamed.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string joined;
  std::vector<int64_t> ids;
  std::string finish;
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    const Json chunk = Json::parse(data[i]).at("choices")[0];
    joined += chunk.at("text").get<std::string>();
    ASSERT_EQ(full_text.compare(0, joined.size(), joined), 0) << joined;
    ASSERT_LE(joined.size(), cut) << "emitted text past the stop: " << joined;
    for (int64_t id : Ids(chunk.at("token_ids"))) ids.push_back(id);
    if (!chunk.at("finish_reason").is_null()) finish = chunk.at("finish_reason");
  }
  EXPECT_EQ(joined, full_text.substr(0, cut));
  EXPECT_THAT(ids, ElementsAreArray(want_ids));
  EXPECT_EQ(finish, "stop");
  EXPECT_EQ(Json::parse(data[data.size() - 2]).at("usage").at("completion_tokens"),
            static_cast<int64_t>(num_ids));
  // A stop that never comes: the whole length.
  Json never = body;
  never["stop"] = "Z";
  const Answer length = Post(port_, "/v1/completions", never.dump());
  ASSERT_EQ(length.status, 200) << length.body;
  EXPECT_EQ(Json::parse(length.body).at("choices")[0].at("text"), full_text);
  EXPECT_EQ(Json::parse(length.body).at("choices")[0].at("finish_reason"), "length");
}

TEST_F(OpenAiHttpTest, EveryBadFieldIs400InOpenAisShapeAndTheServerGoesOn) {
  struct Case {
    const char* body;
    const char* message;
    Json param;
  };
  const Case cases[] = {
      {R"({"model": "lm", "prompt": [1], "max_tokens": 0})", "max_tokens must be >= 1",
       "max_tokens"},
      {R"({"model": "lm", "prompt": [1], "temperature": -1})", "temperature", "temperature"},
      {R"({"model": "lm", "prompt": [1], "top_p": 0})", "top_p 0 must be in (0, 1]", "top_p"},
      {R"({"model": "lm", "prompt": [1], "top_k": -2})", "top_k", "top_k"},
      {R"({"model": "lm", "prompt": [1], "n": 0})", "n must be", "n"},
      {R"({"model": "lm", "prompt": [1], "logprobs": 21})", "logprobs", "logprobs"},
      {R"({"model": "lm", "prompt": []})", "prompt", "prompt"},
      {R"({"model": "lm", "prompt": [-1]})", "prompt", "prompt"},
      {R"({"model": "lm", "prompt": [1], "stream_options": {"include_usage": true}})",
       "stream_options", "stream_options"},
      {R"({"model": "lm", "prompt": [1], "stop": "\n"})", "need the text of model 'lm'",
       "stop"},
      {R"({"model": "lm", "prompt": [1], "stop": ["a", ""]})", "stop[1] must not be empty",
       "stop"},
      {R"({"prompt": [1]})", "model", "model"},
      {R"({"model": "lm", "prompt": [1], )", "not valid JSON", nullptr},
      // The generator's checks: the vocabulary (50), the context (64), text.
      {R"({"model": "lm", "prompt": [1, 50]})", "outside the vocabulary [0, 50)", "prompt"},
      {R"({"model": "lm", "prompt": [1, 2], "max_tokens": 63})",
       "prompt (2 tokens) + max_tokens (63) = 65 exceeds the model's context of 64", "prompt"},
      {R"({"model": "lm", "prompt": "Hello"})", "has no tokenizer", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    ExpectOpenAiError(Post(port_, "/v1/completions", c.body), 400, "BadRequestError",
                      c.message, c.param);
    const Answer ok = Post(port_, "/v1/completions",
                           R"({"model": "lm", "prompt": [5], "max_tokens": 2,
                               "return_token_ids": true})");
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_THAT(Ids(Json::parse(ok.body).at("choices")[0].at("token_ids")),
                ElementsAreArray(Reference({5}, 2, {})));
  }
}

TEST_F(OpenAiHttpTest, UnknownModelIs404) {
  ExpectOpenAiError(Post(port_, "/v1/completions", R"({"model": "nope", "prompt": [1]})"), 404,
                    "NotFoundError", "model 'nope' is not served", "model");
}

TEST_F(OpenAiHttpTest, UnservedV1RouteIs404InOpenAisShape) {
  ExpectOpenAiError(Post(port_, "/v1/chat/completions", R"({"model": "lm"})"), 404,
                    "NotFoundError", "no route for POST /v1/chat/completions", nullptr);
}

TEST_F(OpenAiHttpTest, ModelsListsTheCoordinatorsModels) {
  const Answer a = Get(port_, "/v1/models");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json j = Json::parse(a.body);
  EXPECT_EQ(j.at("object"), "list");
  ASSERT_EQ(j.at("data").size(), 1u);
  EXPECT_EQ(j.at("data")[0].at("id"), "lm");
  EXPECT_EQ(j.at("data")[0].at("object"), "model");
  EXPECT_EQ(j.at("data")[0].at("owned_by"), "meshserve");
}

TEST_F(OpenAiHttpTest, FullQueueIs429) {
  OpenAiTestServerOptions options;
  options.generator.max_waiting = 0;  // every sequence is refused
  Start(options);
  ExpectOpenAiError(Post(port_, "/v1/completions", R"({"model": "lm", "prompt": [1]})"), 429,
                    "RateLimitError", "the generation queue is full", nullptr);
}

TEST_F(OpenAiHttpTest, ChoicesThatDoNotAllFitAre429AndTheStartedOnesCancelled) {
  OpenAiTestServerOptions options;
  options.generator.max_running = 1;  // room for two sequences: one running, one waiting
  options.generator.max_waiting = 1;
  Start(options);
  server_->backend().HoldSteps(true);  // at most one step runs before the cancel
  ExpectOpenAiError(Post(port_, "/v1/completions",
                         R"({"model": "lm", "prompt": [1], "max_tokens": 60, "n": 3})"),
                    429, "RateLimitError", "the generation queue is full", nullptr);
  // The sequences started before the refusal are cancelled: none is left.
  server_->backend().HoldSteps(false);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  GenerationScheduler::Stats stats;
  do {
    stats = server_->generator()->Stats()["lm"];
    if (stats.running == 0 && stats.waiting == 0) break;
    absl::SleepFor(absl::Milliseconds(5));
  } while (absl::Now() < deadline);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_LE(stats.tokens_generated, 1);  // cancelled after at most the held step
}

TEST_F(OpenAiHttpTest, WithoutAGeneratorBothRoutesAre503) {
  OpenAiTestServerOptions options;
  options.with_generator = false;
  Start(options);
  ExpectOpenAiError(Post(port_, "/v1/completions", R"({"model": "lm", "prompt": [1]})"), 503,
                    "ServiceUnavailableError", "generation is not enabled on this coordinator",
                    nullptr);
  ExpectOpenAiError(Get(port_, "/v1/models"), 503, "ServiceUnavailableError",
                    "generation is not enabled", nullptr);
}

TEST_F(OpenAiHttpTest, MissingTokenIs401InOpenAisShape) {
  OpenAiTestServerOptions options;
  options.auth_token = "s3cret";
  Start(options);
  ExpectOpenAiError(Post(port_, "/v1/completions", R"({"model": "lm", "prompt": [1]})"), 401,
                    "AuthenticationError", "missing bearer token", nullptr);
  const Answer ok = Post(port_, "/v1/completions",
                         R"({"model": "lm", "prompt": [1], "max_tokens": 1})", "s3cret");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Connects to 127.0.0.1:port and sends `request`; -1 on failure.
int SendRaw(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(OpenAiHttpTest, ClientLeavingMidStreamCancelsItsSequence) {
  OpenAiTestServerOptions options;
  options.backend.context_length = 100000;
  options.backend.step_delay = absl::Milliseconds(2);
  Start(options);
  // A sequence of the test's own keeps the steps going, so the workers are
  // told of the stream's release on a step (the loop runs no empty steps).
  GenerationRequest background;
  background.model = "lm";
  background.prompt_ids = {1};
  background.stop.max_tokens = 90000;
  ASSERT_OK_AND_ASSIGN(GenerationHandle bg,
                       server_->generator()->Start(background, [](const SequenceEvent&) {}));
  ASSERT_EQ(server_->backend().WaitSeen(1, absl::Seconds(30)).size(), 1u);

  const std::string body =
      R"({"model": "lm", "prompt": [2, 3], "max_tokens": 90000, "stream": true})";
  const int fd = SendRaw(port_, absl::StrCat("POST /v1/completions HTTP/1.1\r\n"
                                             "Host: 127.0.0.1\r\n"
                                             "Content-Type: application/json\r\n"
                                             "Content-Length: ",
                                             body.size(), "\r\n\r\n", body));
  ASSERT_GE(fd, 0);
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {  // the stream has started
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200"));
  close(fd);  // the client leaves

  const std::vector<SequenceId> seen = server_->backend().WaitSeen(2, absl::Seconds(30));
  ASSERT_EQ(seen.size(), 2u);
  const int64_t cached = server_->backend().WaitReleased(seen[1], absl::Seconds(60));
  EXPECT_GE(cached, 2) << "the stream's sequence was never released";
  EXPECT_LT(cached, 2 + 90000 - 1);  // cut short, not run to its end
  EXPECT_EQ(server_->generator()->Stats()["lm"].running, 1);  // the background one
  server_->generator()->Cancel(bg);
}

}  // namespace
}  // namespace meshserve
