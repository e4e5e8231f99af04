// The hand-written GPT-2 and Llama 3 pre-tokenizer regexes on the cases that
// need care (contractions, a space joining the next word, \s+(?!\S), numbers
// in groups of three, newlines), then on 1000 seeded random strings against
// testdata/pretokenizer_cases.jsonl: the splits Python's `regex` module finds
// with the same two patterns (tests/tokenizer/gen_pretokenizer_cases.py).
#include "common/tokenizer/pretokenizer.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace tokenizer {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

std::vector<std::string> Split(absl::string_view text, SplitPattern pattern) {
  auto words = PreTokenize(text, pattern);
  EXPECT_TRUE(words.ok()) << words.status();
  if (!words.ok()) return {};
  return std::vector<std::string>(words->begin(), words->end());
}

TEST(PreTokenizerTest, Gpt2Contractions) {
  EXPECT_THAT(Split("I'm can't we'll they're I've he'd it's", SplitPattern::kGpt2),
              ElementsAre("I", "'m", " can", "'t", " we", "'ll", " they", "'re", " I", "'ve",
                          " he", "'d", " it", "'s"));
  // Case-sensitive in GPT-2: 'S is not a contraction; ' then S go separately.
  EXPECT_THAT(Split("IT'S 'x", SplitPattern::kGpt2), ElementsAre("IT", "'", "S", " '", "x"));
}

TEST(PreTokenizerTest, Gpt2SpacesBeforeWords) {
  EXPECT_THAT(Split("Hello world  foo   bar", SplitPattern::kGpt2),
              ElementsAre("Hello", " world", " ", " foo", "  ", " bar"));
  EXPECT_THAT(Split("x = 42;  // ok\n\n  y", SplitPattern::kGpt2),
              ElementsAre("x", " =", " 42", ";", " ", " //", " ok", "\n\n ", " y"));
}

TEST(PreTokenizerTest, Gpt2TrailingWhitespaceRule) {
  // \s+(?!\S): at the end of text the whole run; before a word, all but one.
  EXPECT_THAT(Split("a   ", SplitPattern::kGpt2), ElementsAre("a", "   "));
  EXPECT_THAT(Split("a \t b", SplitPattern::kGpt2), ElementsAre("a", " \t", " b"));
  EXPECT_THAT(Split("a\tb", SplitPattern::kGpt2), ElementsAre("a", "\t", "b"));
  EXPECT_THAT(Split("   ", SplitPattern::kGpt2), ElementsAre("   "));
}

TEST(PreTokenizerTest, Gpt2UnicodeClasses) {
  // é and 日本 are letters, ² and Ⅻ numbers, emoji neither; U+3000 is \s.
  EXPECT_THAT(Split("café 日本語 x² Ⅻ 🙂!", SplitPattern::kGpt2),
              ElementsAre("café", " 日本語", " x", "²", " Ⅻ", " 🙂!"));
  EXPECT_THAT(Split("a\u3000b", SplitPattern::kGpt2), ElementsAre("a", "\u3000", "b"));
  EXPECT_THAT(Split("12345 abc123", SplitPattern::kGpt2),
              ElementsAre("12345", " abc", "123"));
}

TEST(PreTokenizerTest, Llama3Pattern) {
  EXPECT_THAT(Split("IT'S 12345 hello,world!\n\n  x", SplitPattern::kLlama3),
              ElementsAre("IT", "'S", " ", "123", "45", " hello", ",world", "!\n\n", " ", " x"));
  // \s*[\r\n]+ takes whitespace up to the last newline; \s+(?!\S) leaves one space.
  EXPECT_THAT(Split("a \n \n  b", SplitPattern::kLlama3), ElementsAre("a", " \n \n", " ", " b"));
  EXPECT_THAT(Split("(x)  {", SplitPattern::kLlama3), ElementsAre("(x", ")", " ", " {"));
}

TEST(PreTokenizerTest, KnownPatternsAndRefusal) {
  EXPECT_THAT(SplitPatternFromRegex(kGpt2PatternText), ::meshserve::testing::IsOkAndHolds(SplitPattern::kGpt2));
  EXPECT_THAT(SplitPatternFromRegex(kLlama3PatternText),
              ::meshserve::testing::IsOkAndHolds(SplitPattern::kLlama3));
  EXPECT_THAT(SplitPatternFromRegex("\\w+|\\s+"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unsupported pre-tokenizer regex"));
  EXPECT_THAT(PreTokenize("a\xFF", SplitPattern::kGpt2),
              StatusIs(absl::StatusCode::kInvalidArgument, "not valid UTF-8"));
}

TEST(PreTokenizerTest, RandomStringsMatchPythonRegex) {
  std::ifstream in(std::string(MS_TOKENIZER_TESTDATA) + "/pretokenizer_cases.jsonl");
  std::string line;
  int num_cases = 0;
  while (std::getline(in, line)) {
    const nlohmann::json c = nlohmann::json::parse(line);
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(Split(text, SplitPattern::kGpt2), c["gpt2"].get<std::vector<std::string>>())
        << "GPT-2 pattern on " << c["text"].dump();
    EXPECT_EQ(Split(text, SplitPattern::kLlama3), c["llama3"].get<std::vector<std::string>>())
        << "Llama 3 pattern on " << c["text"].dump();
    ++num_cases;
  }
  EXPECT_EQ(num_cases, 1000) << "missing testdata";
}

TEST(PreTokenizerTest, WordsTileTheText) {
  const std::string text = "Mixed: ÀÉ 'll's\t\r\n 3.14159 東京 ok  ";
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kNone}) {
    std::string joined;
    for (const std::string& w : Split(text, p)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve
