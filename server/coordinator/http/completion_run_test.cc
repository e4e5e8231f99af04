// CompletionRun and ChoiceTracker: events -> OpenAI choice deltas, with and
// without a detokenizer, logprobs, finish reasons, errors, usage.
#include "server/coordinator/http/completion_run.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

SequenceEvent Tokens(std::vector<int64_t> ids, std::vector<float> logprobs = {}) {
  SequenceEvent e;
  e.token_ids = std::move(ids);
  e.logprobs = std::move(logprobs);
  return e;
}

SequenceEvent Last(std::vector<int64_t> ids, FinishReason finish, int64_t prompt_tokens) {
  SequenceEvent e = Tokens(std::move(ids));
  e.finish = finish;
  e.prompt_tokens = prompt_tokens;
  e.completion_tokens = 3;
  e.version = 4;
  return e;
}

// A stand-in tokenizer: id 7 is "ab", any other id "<id>".
std::string Detok(const std::string& model, const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) absl::StrAppend(&out, id == 7 ? "ab" : absl::StrCat("<", id, ">"));
  return out;
}

TEST(CompletionRunTest, TakeReturnsEventsOfEverySinkInArrivalOrder) {
  auto run = std::make_shared<CompletionRun>();
  SequenceSink a = run->SinkFor(0), b = run->SinkFor(1);
  EXPECT_THAT(run->Take(absl::ZeroDuration()), IsEmpty());
  std::thread loop([&] {
    a(Tokens({1}));
    b(Tokens({2}));
    a(Last({3}, FinishReason::kLength, 2));
  });
  std::vector<CompletionRun::Event> got;
  while (got.size() < 3) {
    for (CompletionRun::Event& e : run->Take(absl::Seconds(10))) got.push_back(std::move(e));
  }
  loop.join();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].choice, 0);
  EXPECT_THAT(got[0].event.token_ids, ElementsAre(1));
  EXPECT_EQ(got[1].choice, 1);
  EXPECT_EQ(got[2].event.finish, FinishReason::kLength);
}

TEST(ChoiceTrackerTest, WithoutADetokenizerTextIsEmptyAndTokensAreIds) {
  ChoiceTracker t("lm", 1, /*num_logprobs=*/0, nullptr);
  CompletionChoice d = t.Apply({0, Tokens({12, 7}, {-0.5f, -1.0f})});
  EXPECT_EQ(d.text, "");
  EXPECT_THAT(d.token_ids, ElementsAre(12, 7));
  ASSERT_TRUE(d.logprobs.has_value());
  EXPECT_THAT(d.logprobs->tokens, ElementsAre("12", "7"));
  EXPECT_THAT(d.logprobs->token_logprobs, ElementsAre(-0.5f, -1.0f));
  // logprobs 0: each position's dict holds the sampled token alone.
  using Top = std::vector<std::pair<std::string, float>>;
  EXPECT_THAT(d.logprobs->top_logprobs, ElementsAre(Top{{"12", -0.5f}}, Top{{"7", -1.0f}}));
  EXPECT_THAT(d.logprobs->text_offset, ElementsAre(0, 0));
  EXPECT_EQ(d.finish_reason, "");
  EXPECT_FALSE(t.all_finished());
  d = t.Apply({0, Last({9}, FinishReason::kStop, 5)});
  EXPECT_EQ(d.finish_reason, "stop");
  EXPECT_TRUE(t.all_finished());
  EXPECT_OK(t.error());
  EXPECT_EQ(t.usage().prompt_tokens, 5);
  EXPECT_EQ(t.usage().completion_tokens, 3);
}

TEST(ChoiceTrackerTest, WithADetokenizerTextAndOffsetsFollowTheTokens) {
  ChoiceTracker t("lm", 2, /*num_logprobs=*/2, Detok);
  CompletionChoice whole;
  AppendChoiceDelta(t.Apply({1, Tokens({7, 3}, {-1, -2})}), &whole);
  AppendChoiceDelta(t.Apply({1, Last({7}, FinishReason::kLength, 1)}), &whole);
  EXPECT_EQ(whole.index, 1);
  EXPECT_EQ(whole.text, "ab<3>ab");
  EXPECT_THAT(whole.token_ids, ElementsAre(7, 3, 7));
  ASSERT_TRUE(whole.logprobs.has_value());
  EXPECT_THAT(whole.logprobs->tokens, ElementsAre("ab", "<3>", "ab"));
  EXPECT_THAT(whole.logprobs->text_offset, ElementsAre(0, 2, 5));
  EXPECT_EQ(whole.finish_reason, "length");
  EXPECT_FALSE(t.all_finished());  // choice 0 has not finished
  t.Apply({0, Last({1}, FinishReason::kLength, 1)});
  EXPECT_TRUE(t.all_finished());
  EXPECT_EQ(t.usage().completion_tokens, 4);
}

// Logprobs detokenize each token once (its text and its byte count come from
// one call), besides the one call for the delta's text.
TEST(ChoiceTrackerTest, LogprobsDetokenizeEachTokenOnce) {
  std::vector<std::vector<int64_t>> calls;
  auto counting = [&calls](const std::string& model, const std::vector<int64_t>& ids) {
    calls.push_back(ids);
    return Detok(model, ids);
  };
  ChoiceTracker t("lm", 1, /*num_logprobs=*/0, counting);
  CompletionChoice d = t.Apply({0, Tokens({7, 3}, {-1, -2})});
  EXPECT_EQ(d.text, "ab<3>");
  ASSERT_TRUE(d.logprobs.has_value());
  EXPECT_THAT(d.logprobs->tokens, ElementsAre("ab", "<3>"));
  EXPECT_THAT(d.logprobs->text_offset, ElementsAre(0, 2));
  EXPECT_THAT(calls, ElementsAre(ElementsAre(7), ElementsAre(3), ElementsAre(7, 3)));
}

// OpenAI's legacy top_logprobs: per position the N most likely tokens (as
// text), most likely first, and the sampled token after them when it is not
// among them (N + 1 entries).
TEST(ChoiceTrackerTest, TopLogprobsListTheTopNAndTheSampledTokenWhenNotAmongThem) {
  using Top = std::vector<std::pair<std::string, float>>;
  ChoiceTracker t("lm", 1, /*num_logprobs=*/2, Detok);
  SequenceEvent e = Tokens({7, 3}, {-0.25f, -3.0f});
  e.top_logprobs = {{{7, -0.25f}, {5, -1.5f}}, {{7, -0.5f}, {5, -1.0f}}};
  CompletionChoice d = t.Apply({0, e});
  ASSERT_TRUE(d.logprobs.has_value());
  EXPECT_THAT(d.logprobs->tokens, ElementsAre("ab", "<3>"));
  EXPECT_THAT(d.logprobs->token_logprobs, ElementsAre(-0.25f, -3.0f));
  EXPECT_THAT(d.logprobs->top_logprobs,
              ElementsAre(Top{{"ab", -0.25f}, {"<5>", -1.5f}},
                          Top{{"ab", -0.5f}, {"<5>", -1.0f}, {"<3>", -3.0f}}));
  // Without a tokenizer the keys are the ids' decimal strings.
  ChoiceTracker ids("lm", 1, /*num_logprobs=*/1, nullptr);
  SequenceEvent one = Tokens({4}, {-0.1f});
  one.top_logprobs = {{{4, -0.1f}}};
  EXPECT_THAT(ids.Apply({0, one}).logprobs->top_logprobs, ElementsAre(Top{{"4", -0.1f}}));
}

// Token bytes that split characters: 20 is E2 82, 21 is AC (E2 82 AC is the
// euro sign), 22 is a lone lead byte F0.
std::string SplitBytes(const std::string& model, const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += id == 20 ? "\xE2\x82" : id == 21 ? "\xAC" : "\xF0";
  return out;
}

TEST(ChoiceTrackerTest, AChunkNeverSplitsACharacterAndTheEndFlushesAsReplacement) {
  ChoiceTracker t("lm", 1, /*num_logprobs=*/0, SplitBytes);
  CompletionChoice d = t.Apply({0, Tokens({20}, {-1})});
  EXPECT_EQ(d.text, "");  // held back: the euro sign is not complete yet
  EXPECT_THAT(d.logprobs->tokens, ElementsAre("\xEF\xBF\xBD"));  // alone: U+FFFD
  d = t.Apply({0, Tokens({21, 22}, {-1, -1})});
  EXPECT_EQ(d.text, "\xE2\x82\xAC");  // the euro sign; F0 held back
  EXPECT_THAT(d.logprobs->text_offset, ElementsAre(2, 3));
  d = t.Apply({0, Last({}, FinishReason::kLength, 1)});
  EXPECT_EQ(d.text, "\xEF\xBF\xBD");  // the incomplete F0, flushed as U+FFFD
}

TEST(ChoiceTrackerTest, StopStringsCutTheTextAndHoldBackAPossibleStart) {
  // id 7 is "ab", others "<id>"; stops "b<1" and "<9>".
  ChoiceTracker t("lm", 2, -1, Detok, {"b<1", "<9>"});
  CompletionChoice d = t.Apply({0, Tokens({7})});
  EXPECT_EQ(d.text, "a");  // "b" may start "b<1"
  d = t.Apply({0, Tokens({2})});
  EXPECT_EQ(d.text, "b<2>");  // settled
  d = t.Apply({0, Tokens({7})});
  EXPECT_EQ(d.text, "a");
  // The generator's last event ends at the token that completed the stop.
  d = t.Apply({0, Last({12}, FinishReason::kStop, 1)});
  EXPECT_EQ(d.text, "");  // "b<12>": the stop "b<1" and what follows are cut
  EXPECT_EQ(d.finish_reason, "stop");
  EXPECT_THAT(d.token_ids, ElementsAre(12));
  // Choice 1 has its own matcher; a held-back start is released at the end.
  d = t.Apply({1, Tokens({3, 7})});
  EXPECT_EQ(d.text, "<3>a");
  d = t.Apply({1, Last({}, FinishReason::kLength, 1)});
  EXPECT_EQ(d.text, "b");
}

TEST(ChoiceTrackerTest, NoLogprobsUnlessAsked) {
  ChoiceTracker t("lm", 1, -1, nullptr);
  EXPECT_FALSE(t.Apply({0, Tokens({1}, {-1})}).logprobs.has_value());
}

TEST(ChoiceTrackerTest, AnErrorOrAServerCancelIsTheChoicesError) {
  ChoiceTracker t("lm", 2, -1, nullptr);
  SequenceEvent failed = Last({}, FinishReason::kError, 1);
  failed.status = absl::UnavailableError("worker 2 lost three times");
  CompletionChoice d = t.Apply({1, failed});
  EXPECT_EQ(d.finish_reason, "");
  EXPECT_THAT(t.error(), StatusIs(absl::StatusCode::kUnavailable, "worker 2 lost"));
  ChoiceTracker c("lm", 1, -1, nullptr);
  c.Apply({0, Last({}, FinishReason::kCancelled, 1)});
  EXPECT_THAT(c.error(), StatusIs(absl::StatusCode::kUnavailable,
                                  "choice 0 of the completion ended before its last token "
                                  "(cancelled)"));
}

}  // namespace
}  // namespace meshserve
