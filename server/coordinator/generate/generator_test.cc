// Generator: per-model loops, request checks, seeds, version pinning, text
// prompts through the model's tokenizer and TokenTextDecoder.
#include "server/coordinator/generate/generator.h"

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/generate/testing/char_tokenizer.h"
#include "server/coordinator/generate/testing/fake_steps.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::FakeExecutor;
using ::meshserve::testing::Reference;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAreArray;

class FakeBackend : public GenerationBackend {
 public:
  absl::StatusOr<GenerationModel> Model(const std::string& name) override {
    if (name == "plain") return absl::FailedPreconditionError("model 'plain' cannot generate");
    if (name != "lm") return absl::NotFoundError("no model '" + name + "'");
    GenerationModel m;
    m.vocab_size = 50;
    m.context_length = 64;
    m.block_tokens = 4;
    m.num_blocks = 64;
    m.version = version;
    m.hold = hold;
    m.tokenizer = tokenizer;
    m.tokenizer_error = tokenizer_error;
    return m;
  }
  absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string& name) override {
    ++executors;
    auto executor = std::make_unique<FakeExecutor>();
    last_executor = executor.get();
    return std::unique_ptr<StepExecutor>(std::move(executor));
  }
  int64_t version = 1;
  std::shared_ptr<const void> hold = std::make_shared<int>(1);  // the version's placement
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  absl::Status tokenizer_error;
  int executors = 0;
  FakeExecutor* last_executor = nullptr;
};

struct Result {
  std::vector<int64_t> tokens;
  SequenceEvent last;
  absl::Notification done;
};

SequenceSink Collect(Result* r) {
  return [r](const SequenceEvent& e) {
    r->tokens.insert(r->tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finish != FinishReason::kNone) {
      r->last = e;
      r->done.Notify();
    }
  };
}

GenerationRequest Request(std::vector<int64_t> ids, int64_t max_tokens) {
  GenerationRequest r;
  r.model = "lm";
  r.prompt_ids = std::move(ids);
  r.stop.max_tokens = max_tokens;
  return r;
}

TEST(GeneratorTest, GeneratesThroughOneLoopPerModelPinnedToTheVersion) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  Result a, b;
  ASSERT_OK_AND_ASSIGN(GenerationHandle ha, generator.Start(Request({1, 2, 3}, 8), Collect(&a)));
  backend.version = 2;  // a push committed: the next sequence runs on version 2
  ASSERT_OK_AND_ASSIGN(GenerationHandle hb, generator.Start(Request({4}, 5), Collect(&b)));
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_EQ(backend.executors, 1);
  EXPECT_EQ(ha.version, 1);
  EXPECT_EQ(hb.version, 2);
  EXPECT_EQ(a.last.version, 1);
  EXPECT_EQ(b.last.version, 2);
  EXPECT_THAT(a.tokens, ElementsAreArray(Reference({1, 2, 3}, 8, {})));
  EXPECT_THAT(b.tokens, ElementsAreArray(Reference({4}, 5, {})));
  EXPECT_EQ(a.last.finish, FinishReason::kLength);
  EXPECT_EQ(a.last.prompt_tokens, 3);
  EXPECT_EQ(a.last.completion_tokens, 8);
}

// StartGroup: n choices of one prompt share its prefill on an executor that
// forks (the fake's): each equals a Start of its own, with its own seed, and
// the prompt is prefilled once. A refusal of any choice starts none.
TEST(GeneratorTest, AGroupSharesThePromptsPrefillAndStartsAllOrNone) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  const std::vector<int64_t> prompt = {9, 8, 7, 6, 5, 4, 3};
  Result r[3];
  std::vector<GenerationRequest> requests;
  std::vector<Generator::SinkFactory> sinks;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest q = Request(prompt, 5);
    q.has_seed = true;
    q.sampling.seed = 70 + static_cast<uint64_t>(i);
    requests.push_back(q);
    sinks.push_back([&r, i](const GenerationHandle&) { return Collect(&r[i]); });
  }
  ASSERT_OK_AND_ASSIGN(std::vector<GenerationHandle> handles,
                       generator.StartGroup(requests, sinks));
  ASSERT_EQ(handles.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    r[i].done.WaitForNotification();
    EXPECT_THAT(r[i].tokens, ElementsAreArray(Reference(prompt, 5, {})));
    EXPECT_EQ(r[i].last.prompt_tokens, 7);
    EXPECT_EQ(backend.last_executor->workers.seeds.at(handles[i].seq), 70u + i);
  }
  EXPECT_EQ(backend.last_executor->workers.forked, 2);
  EXPECT_EQ(backend.last_executor->workers.prefill_tokens, 6);
  // Choice 1's id is outside the vocabulary: nothing starts.
  requests[1].prompt_ids = {9, 8, 7, 6, 5, 4, 50};
  requests[2].prompt_ids = requests[1].prompt_ids;
  EXPECT_THAT(generator.StartGroup(requests, sinks).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "outside the vocabulary"));
  EXPECT_EQ(generator.Stats().at("lm").waiting + generator.Stats().at("lm").running, 0);
}

// A sequence holds its version's placement until it ends (the coordinator
// unloads a retired version only when nothing holds it).
TEST(GeneratorTest, ASequenceHoldsItsVersionUntilItEnds) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  std::weak_ptr<const void> v1 = backend.hold;
  Result r;
  std::atomic<int> events{0}, held{0};
  SequenceSink collect = Collect(&r);
  // Each event (the last one too) comes while the sequence is alive: the hold
  // must be there every time, whatever the timing.
  SequenceSink sink = [&, collect](const SequenceEvent& e) {
    events.fetch_add(1);
    if (!v1.expired()) held.fetch_add(1);
    collect(e);
  };
  ASSERT_OK(generator.Start(Request({1}, 8), sink).status());
  backend.hold.reset();  // a push: the coordinator lets version 1 go
  r.done.WaitForNotification();
  EXPECT_GT(events.load(), 0);
  EXPECT_EQ(held.load(), events.load());
  for (int i = 0; i < 400 && !v1.expired(); ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(v1.expired());  // gone with the sequence
}

TEST(GeneratorTest, MetricsCountTokensAndTimeTheFirst) {
  FakeBackend backend;
  MetricRegistry registry;
  GeneratorOptions options;
  options.metrics = &registry;
  Generator generator(&backend, options);
  Result r;
  ASSERT_OK(generator.Start(Request({1, 2}, 6), Collect(&r)).status());
  r.done.WaitForNotification();
  const std::string text = registry.Exposition();
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "meshserve_generation_tokens_total{model=\"lm\"} 6"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "meshserve_generation_time_to_first_token_seconds_count{model=\"lm\"} 1"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "meshserve_generation_inter_token_seconds_count{model=\"lm\"} 5"));
  EXPECT_THAT(text, ::testing::HasSubstr("meshserve_generation_sequences{model=\"lm\",state=\"running\"}"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "meshserve_generation_prefill_tokens_total{model=\"lm\"} 2"));
  // 3 choices of a 7-token prompt prefill 6 tokens once (alone: 21).
  Result g[3];
  std::vector<GenerationRequest> requests(3, Request({9, 8, 7, 6, 5, 4, 3}, 2));
  std::vector<Generator::SinkFactory> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back([&g, i](const GenerationHandle&) { return Collect(&g[i]); });
  }
  ASSERT_OK(generator.StartGroup(requests, sinks).status());
  for (Result& one : g) one.done.WaitForNotification();
  EXPECT_THAT(registry.Exposition(),
              ::testing::HasSubstr("meshserve_generation_prefill_tokens_total{model=\"lm\"} 8"));
  EXPECT_EQ(GenerationMetrics::Snapshot(registry).at("lm").prefill_tokens, 8);
}

TEST(GeneratorTest, RefusesBadRequestsNamingTheValue) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  GenerationRequest r = Request({1, 50}, 4);
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt token 1 is 50, outside the vocabulary [0, 50)"));
  r = Request({1, 2}, 63);
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt (2 tokens) + max_tokens (63) = 65 exceeds the model's context "
                       "of 64"));
  r.model = "nope";
  EXPECT_THAT(generator.Start(r, nullptr).status(), StatusIs(absl::StatusCode::kNotFound));
  r.model = "plain";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  r = Request({}, 4);
  r.prompt_text = "hello";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no tokenizer"));
  // Still serving.
  Result ok;
  ASSERT_OK(generator.Start(Request({7}, 3), Collect(&ok)).status());
  ok.done.WaitForNotification();
  EXPECT_EQ(ok.tokens.size(), 3u);
}

TEST(GeneratorTest, CancelEndsTheSequence) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  Result r;
  ASSERT_OK_AND_ASSIGN(GenerationHandle h, generator.Start(Request({1}, 60), Collect(&r)));
  generator.Cancel(h);
  r.done.WaitForNotification();
  EXPECT_THAT(r.last.finish, ::testing::AnyOf(FinishReason::kCancelled, FinishReason::kLength));
}

TEST(GeneratorTest, SeedsAreDrawnWhenNotGiven) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  GenerationRequest r = Request({1}, 2);
  r.has_seed = true;
  r.sampling.seed = 42;
  Result a, b, c;
  ASSERT_OK_AND_ASSIGN(GenerationHandle ha, generator.Start(r, Collect(&a)));
  ASSERT_OK_AND_ASSIGN(GenerationHandle hb, generator.Start(Request({1}, 2), Collect(&b)));
  ASSERT_OK_AND_ASSIGN(GenerationHandle hc, generator.Start(Request({1}, 2), Collect(&c)));
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  c.done.WaitForNotification();
  const auto& seeds = backend.last_executor->workers.seeds;
  EXPECT_EQ(seeds.at(ha.seq), 42u);
  EXPECT_NE(seeds.at(hb.seq), seeds.at(hc.seq));
}

// 'a'..'z' <-> ids 0..25, one per letter; ids 40..43 are the bytes E2, 82,
// AC (the three of U+20AC) and FF (never valid in UTF-8); others unknown.
// Text encodes character by character ('C' has no token).
class LetterTokenizer : public testing::CharTokenizer {
 public:
  LetterTokenizer() : CharTokenizer(Pieces()) {}

 private:
  static std::vector<std::string> Pieces() {
    std::vector<std::string> pieces = Alphabet("abcdefghijklmnopqrstuvwxyz");
    pieces.resize(40);
    for (const char* byte : {"\xE2", "\x82", "\xAC", "\xFF"}) pieces.push_back(byte);
    return pieces;
  }
};

TEST(GeneratorTest, TextPromptsAreEncodedWithTheModelsTokenizer) {
  FakeBackend backend;
  auto tok = std::make_shared<LetterTokenizer>();
  backend.tokenizer = tok;
  Generator generator(&backend, GeneratorOptions{});
  GenerationRequest r = Request({}, 6);
  r.prompt_text = "cab";
  Result a;
  ASSERT_OK_AND_ASSIGN(GenerationHandle h, generator.Start(r, Collect(&a)));
  a.done.WaitForNotification();
  EXPECT_EQ(h.prompt_tokens, 3);
  EXPECT_THAT(h.prompt_ids, ElementsAreArray({2, 0, 1}));
  EXPECT_EQ(h.tokenizer.get(), tok.get());
  EXPECT_THAT(a.tokens, ElementsAreArray(Reference({2, 0, 1}, 6, {})));
  // BOS as the tokenizer says; the sink is made from the handle before the
  // sequence runs.
  tokenizer::SpecialTokenConfig special;
  special.bos_id = 25;
  special.add_bos = true;
  tok->set_special_tokens(special);
  Result b;
  int64_t factory_prompt_tokens = -1;
  ASSERT_OK(generator
                .StartWith(r,
                           [&](const GenerationHandle& made) {
                             factory_prompt_tokens = made.prompt_tokens;
                             EXPECT_EQ(made.tokenizer.get(), tok.get());
                             return Collect(&b);
                           })
                .status());
  b.done.WaitForNotification();
  EXPECT_EQ(factory_prompt_tokens, 4);
  EXPECT_THAT(b.tokens, ElementsAreArray(Reference({25, 2, 0, 1}, 6, {})));
  tok->set_special_tokens({});
  r.prompt_text = "";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "encodes to no tokens"));
  r.prompt_text = "Cab";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no token for 'C'"));
}

TEST(GeneratorTest, ATokenizerThatDidNotLoadRefusesTextWithItsError) {
  FakeBackend backend;
  backend.tokenizer_error = absl::InvalidArgumentError("lm.tokenizer/vocab.json: bad JSON");
  Generator generator(&backend, GeneratorOptions{});
  GenerationRequest r = Request({}, 2);
  r.prompt_text = "ab";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "its tokenizer did not load: lm.tokenizer/vocab.json: bad JSON"));
  Result ok;
  ASSERT_OK(generator.Start(Request({7}, 2), Collect(&ok)).status());
  ok.done.WaitForNotification();
}

TEST(TokenTextDecoderTest, NeverSplitsACharacterAndReplacesInvalidBytes) {
  TokenTextDecoder text(std::make_shared<LetterTokenizer>());
  EXPECT_EQ(text.Next({7, 8}, false), "hi");
  EXPECT_EQ(text.Next({40}, false), "");  // E2: held back
  EXPECT_EQ(text.Next({41}, false), "");  // E2 82: held back
  EXPECT_EQ(text.Next({42, 0}, false), "\xE2\x82\xAC" "a");  // U+20AC
  EXPECT_EQ(text.Next({43, 99}, false), "\xEF\xBF\xBD");  // FF -> U+FFFD; 99 unknown
  EXPECT_EQ(text.Next({40, 41}, true), "\xEF\xBF\xBD");   // a dangling E2 82: one U+FFFD
  EXPECT_EQ(text.Next({40, 0}, true), "\xEF\xBF\xBD" "a");
  TokenTextDecoder none(nullptr);
  EXPECT_EQ(none.Next({1, 2}, true), "");
}

TEST(TokenTextDecoderTest, StopsAtAStopSpanningTokensHoldingBackItsStart) {
  TokenTextDecoder text(std::make_shared<LetterTokenizer>(), {"bc", "xyz"});
  EXPECT_EQ(text.Next({0}, false), "a");
  EXPECT_EQ(text.Next({1}, false), "");    // "b" may start "bc": held
  EXPECT_EQ(text.Next({3}, false), "bd");  // settled
  EXPECT_EQ(text.Next({23, 24}, false), "");  // "xy" held
  const TokenTextDecoder::Piece piece = text.Decode({0, 1, 2, 3}, false);  // "abcd"
  EXPECT_EQ(piece.text, "xya");
  EXPECT_TRUE(piece.stopped);
  EXPECT_EQ(piece.num_ids, 3u);  // up to and including the 'c'
  EXPECT_EQ(text.Next({4}, true), "");
}

TEST(TokenTextDecoderTest, AMultiByteStopSpansTheTokensOfOneCharacter) {
  // U+20AC is ids 40, 41, 42 (one byte each).
  TokenTextDecoder text(std::make_shared<LetterTokenizer>(), {"\xE2\x82\xAC"});
  const TokenTextDecoder::Piece piece = text.Decode({0, 40, 41, 42, 1}, false);
  EXPECT_EQ(piece.text, "a");
  EXPECT_TRUE(piece.stopped);
  EXPECT_EQ(piece.num_ids, 4u);
  // A lone E2 at the end is U+FFFD, not the stop.
  TokenTextDecoder other(std::make_shared<LetterTokenizer>(), {"\xE2\x82\xAC"});
  const TokenTextDecoder::Piece end = other.Decode({0, 40}, true);
  EXPECT_EQ(end.text, "a\xEF\xBF\xBD");
  EXPECT_FALSE(end.stopped);
}

// The bytes LetterTokenizer gives `ids` (independent of TokenTextDecoder).
std::string LetterBytes(const std::vector<int64_t>& ids) {
  static const char* kBytes[] = {"\xE2", "\x82", "\xAC", "\xFF"};
  std::string out;
  for (int64_t id : ids) {
    if (id < 26) out += static_cast<char>('a' + id);
    if (id >= 40 && id < 44) out += kBytes[id - 40];
  }
  return out;
}

TEST(GeneratorTest, AStopStringEndsTheSequenceAtTheTokenThatCompletesIt) {
  FakeBackend backend;
  backend.tokenizer = std::make_shared<LetterTokenizer>();
  Generator generator(&backend, GeneratorOptions{});
  const std::vector<int64_t> prompt = {3, 1, 4};
  const std::vector<int64_t> full = Reference(prompt, 40, {});
  const std::string full_text = tokenizer::DecodeUtf8Lossy(LetterBytes(full));
  // A stop of two letters that first occurs after the 8th token: it spans
  // tokens (each letter is one).
  std::string stop;
  size_t want_ids = 0;
  for (size_t k = 8; k < full.size() && stop.empty(); ++k) {
    const std::string a = tokenizer::DecodeUtf8Lossy(LetterBytes({full[k - 1]}));
    const std::string b = tokenizer::DecodeUtf8Lossy(LetterBytes({full[k]}));
    if (a.size() == 1 && b.size() == 1 && full_text.find(a + b) != std::string::npos &&
        full_text.find(a + b) >= 4) {
      stop = a + b;
    }
  }
  ASSERT_FALSE(stop.empty()) << full_text;
  for (size_t k = 1; k <= full.size(); ++k) {
    if (tokenizer::DecodeUtf8Lossy(LetterBytes({full.begin(), full.begin() + k})).find(stop) !=
        std::string::npos) {
      want_ids = k;
      break;
    }
  }
  GenerationRequest r = Request(prompt, 40);
  r.stop_strings = {stop, "never"};
  Result a;  // its Notification fails on a second last event
  std::string streamed;
  ASSERT_OK_AND_ASSIGN(GenerationHandle h,
                       generator.StartWith(r, [&](const GenerationHandle& made) {
                         auto text = std::make_shared<TokenTextDecoder>(made.tokenizer,
                                                                        made.stop_strings);
                         SequenceSink collect = Collect(&a);
                         return [&streamed, text, collect](const SequenceEvent& e) {
                           streamed += text->Next(e.token_ids, e.finish != FinishReason::kNone);
                           collect(e);
                         };
                       }));
  a.done.WaitForNotification();
  EXPECT_EQ(a.last.finish, FinishReason::kStop);
  EXPECT_THAT(a.tokens, ElementsAreArray(std::vector<int64_t>(full.begin(),
                                                              full.begin() + want_ids)));
  EXPECT_EQ(a.last.completion_tokens, static_cast<int64_t>(want_ids));
  EXPECT_EQ(a.last.prompt_tokens, 3);
  EXPECT_EQ(a.last.version, 1);
  EXPECT_EQ(streamed, full_text.substr(0, full_text.find(stop)));
  EXPECT_THAT(h.stop_strings, ElementsAreArray({stop, std::string("never")}));
  // The sequence was cancelled: nothing runs once the loop caught up.
  for (int i = 0; i < 1000 && generator.Stats()["lm"].running > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(generator.Stats()["lm"].running, 0);
  // A stop that never occurs: the whole length, finish "length".
  Result b;
  r.stop_strings = {"never"};
  ASSERT_OK(generator.Start(r, Collect(&b)).status());
  b.done.WaitForNotification();
  EXPECT_EQ(b.last.finish, FinishReason::kLength);
  EXPECT_THAT(b.tokens, ElementsAreArray(full));
}

TEST(GeneratorTest, StopStringsNeedATokenizerAndNonEmptyUtf8) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  GenerationRequest r = Request({1, 2}, 4);
  r.stop_strings = {"\n"};
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "stop strings [\"\n\"] need the text of model 'lm'"));
  backend.tokenizer = std::make_shared<LetterTokenizer>();
  r.stop_strings = {"a", ""};
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "stop[1] is empty"));
  r.stop_strings = {"\xC3"};
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "stop[0] is not valid UTF-8"));
}

}  // namespace
}  // namespace meshserve
