// StopStringMatcher: the text ends before the earliest stop string, what
// might still be a stop is held back and never emitted then taken back;
// checked on hand cases (stops spanning pushes, several stops, multi-byte
// UTF-8) and against a whole-text reference on random streams.
#include "common/tokenizer/stop_strings.h"

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace meshserve {
namespace tokenizer {
namespace {

// Pushes `pieces` one by one; returns each Push's output, then Finish's.
std::vector<std::string> PushAll(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.push_back(m.Push(p));
  out.push_back(m.Finish());
  return out;
}

TEST(StopStringMatcherTest, HoldsBackAPossibleStopUntilSettled) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.Push("xab"), "x");
  EXPECT_EQ(m.num_held_bytes(), 2u);
  EXPECT_EQ(m.Push("d"), "abd");  // "abd" is no stop: released
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopStringMatcherTest, AStopSpanningPushesEndsTheText) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(PushAll(m, {"xa", "b", "c!!", "more"}),
            (std::vector<std::string>{"x", "", "", "", ""}));
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringMatcherTest, TheEarliestStartingStopWinsAmongSeveral) {
  StopStringMatcher m({"world", "lo w", "\n"});
  // "lo w" starts at 3, "world" at 6 (both complete in this push).
  EXPECT_EQ(m.Push("hello world\n"), "hel");
  EXPECT_TRUE(m.stopped());
  StopStringMatcher n({"\n\n", "END"});
  EXPECT_EQ(n.Push("a\nb"), "a\nb");
  EXPECT_EQ(n.Push("E"), "");
  EXPECT_EQ(n.Push("N\n"), "EN");  // "EN\n": \n may start "\n\n"
  EXPECT_EQ(n.Push("\nx"), "");
  EXPECT_TRUE(n.stopped());
}

TEST(StopStringMatcherTest, AStopAtTheVeryStartGivesNoText) {
  StopStringMatcher m({"Q"});
  EXPECT_EQ(PushAll(m, {"Qabc"}), (std::vector<std::string>{"", ""}));
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringMatcherTest, MultiByteStopsNeverSplitACharacter) {
  // "é" = C3 A9, "日本" = E6 97 A5 E6 9C AC.
  StopStringMatcher m({"日本", "é!"});
  EXPECT_EQ(m.Push("caf\xC3\xA9"), "caf");  // "é" may start "é!"
  EXPECT_EQ(m.Push(" \xE6\x97\xA5"), "\xC3\xA9 ");  // "日" may start "日本"
  EXPECT_EQ(m.Push("\xE6\x9C\xAC tail"), "");
  EXPECT_TRUE(m.stopped());
  // A stop sharing only a lead byte with the text holds nothing.
  StopStringMatcher n({"\xC3\xA9"});  // "é"
  EXPECT_EQ(n.Push("\xC3\xA8"), "\xC3\xA8");  // "è"
}

TEST(StopStringMatcherTest, NoStopsPassTheTextThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(PushAll(m, {"a", "bc"}), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, ValidateNamesTheBadEntry) {
  EXPECT_TRUE(ValidateStopStrings({"a", "\n"}, "stop").ok());
  absl::Status empty = ValidateStopStrings({"a", ""}, "stop");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("stop[1] is empty"), absl::string_view::npos) << empty;
  absl::Status bad = ValidateStopStrings({"\xC3"}, "stop");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("stop[0] is not valid UTF-8"), absl::string_view::npos) << bad;
}

// Random texts over a small alphabet (ASCII and multi-byte characters), a
// few random stops, random splits: the output equals the whole-text
// reference T[0, min find), and whatever is held is a proper prefix of a stop.
TEST(StopStringMatcherTest, MatchesTheWholeTextReferenceOnRandomStreams) {
  const char* env = std::getenv("MESHSERVE_TEST_SEED");
  const unsigned seed = env != nullptr ? static_cast<unsigned>(std::atoi(env)) : 20261205u;
  SCOPED_TRACE(testing::Message() << "MESHSERVE_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  const std::vector<std::string> alphabet = {"a", "b", "\n", "\xC3\xA9", "\xE6\x97\xA5"};
  auto word = [&](int min_chars, int max_chars) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(min_chars, max_chars)(rng);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> stops;
    const int num_stops = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int i = 0; i < num_stops; ++i) stops.push_back(word(1, 3));
    std::vector<std::string> pieces;
    std::string whole;
    const int num_pieces = std::uniform_int_distribution<int>(1, 8)(rng);
    for (int i = 0; i < num_pieces; ++i) {
      pieces.push_back(word(0, 3));
      whole += pieces.back();
    }
    size_t cut = std::string::npos;
    for (const std::string& s : stops) cut = std::min(cut, whole.find(s));
    const std::string want = whole.substr(0, cut);

    StopStringMatcher m(stops);
    std::string got;
    for (const std::string& p : pieces) {
      got += m.Push(p);
      ASSERT_EQ(want.compare(0, got.size(), got), 0) << "emitted past the reference: " << got;
      if (m.stopped()) continue;
      const size_t h = m.num_held_bytes();
      bool prefix_of_stop = h == 0;
      for (const std::string& s : stops) {
        if (h < s.size() && got.size() + h <= whole.size() &&
            whole.compare(got.size(), h, s, 0, h) == 0) {
          prefix_of_stop = true;
        }
      }
      ASSERT_TRUE(prefix_of_stop) << "held " << h << " bytes that start no stop";
    }
    got += m.Finish();
    ASSERT_EQ(got, want);
    ASSERT_EQ(m.stopped(), cut != std::string::npos);
  }
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve
