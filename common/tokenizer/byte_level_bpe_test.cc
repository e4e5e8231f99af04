// ByteLevelBpe on tiny hand-made vocabularies: the merge order (lowest rank
// first, leftmost on ties, overlaps), agreement with a transcription of GPT-2's
// encoder.py bpe() loop on random merge tables and words, ignore_merges, added
// tokens (lstrip/rstrip/single_word), decoding, and Create()'s validation.
#include "common/tokenizer/byte_level_bpe.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace tokenizer {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

// The 256 byte-level characters (id = byte value), plus `extra` tokens.
ByteLevelBpe::Vocab ByteVocab(const std::vector<std::string>& extra) {
  ByteLevelBpe::Vocab vocab;
  for (int b = 0; b < 256; ++b) {
    vocab.emplace_back(BytesToByteLevel(std::string(1, static_cast<char>(b))), b);
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    vocab.emplace_back(extra[i], static_cast<int32_t>(256 + i));
  }
  return vocab;
}

std::unique_ptr<ByteLevelBpe> Make(const std::vector<std::string>& extra,
                                   const ByteLevelBpe::Merges& merges,
                                   std::vector<AddedToken> added = {},
                                   ByteLevelBpe::Options options = {}) {
  auto bpe = ByteLevelBpe::Create(ByteVocab(extra), merges, std::move(added), options);
  EXPECT_TRUE(bpe.ok()) << bpe.status();
  return bpe.ok() ? *std::move(bpe) : nullptr;
}

std::vector<int32_t> Word(const ByteLevelBpe& bpe, absl::string_view word) {
  std::vector<int32_t> ids;
  bpe.EncodeWord(word, &ids);
  return ids;
}

TEST(ByteLevelBpeTest, ByteMappingIsGpt2s) {
  EXPECT_EQ(ByteToUnicode('!'), static_cast<uint32_t>('!'));
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToUnicode(0xAD), 0x143u);  // the last of the 68 remapped bytes
  EXPECT_EQ(ByteToUnicode(0xE9), 0xE9u);
}

TEST(ByteLevelBpeTest, LowestRankMergesFirst) {
  // "abc": (b,c) outranks (a,b), so the result is a + bc, not abc.
  auto bpe = Make({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}});
  EXPECT_THAT(Word(*bpe, "abc"), ElementsAre('a', 257));
  // Ranks swapped: ab first, then ab + c.
  auto swapped = Make({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  EXPECT_THAT(Word(*swapped, "abc"), ElementsAre(258));
}

TEST(ByteLevelBpeTest, OverlapsMergeLeftmostFirst) {
  auto bpe = Make({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}});
  EXPECT_THAT(Word(*bpe, "aaa"), ElementsAre(256, 'a'));
  EXPECT_THAT(Word(*bpe, "aaaaa"), ElementsAre(257, 'a'));
  EXPECT_THAT(Word(*bpe, "a"), ElementsAre('a'));
}

// GPT-2's encoder.py bpe(), transcribed: merge every occurrence of the
// lowest-ranked pair, left to right, until no pair has a rank.
std::vector<std::string> ReferenceBpe(const std::string& word,
                                      const absl::flat_hash_map<std::string, int>& ranks) {
  std::vector<std::string> w;
  for (char c : word) w.emplace_back(1, c);
  while (w.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      auto it = ranks.find(w[i] + " " + w[i + 1]);
      if (it != ranks.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bigram = {w[i], w[i + 1]};
      }
    }
    if (best < 0) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == bigram.first && w[i + 1] == bigram.second) {
        next.push_back(w[i] + w[i + 1]);
        i += 2;
      } else {
        next.push_back(w[i++]);
      }
    }
    w = std::move(next);
  }
  return w;
}

TEST(ByteLevelBpeTest, AgreesWithGpt2LoopOnRandomTables) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    std::vector<std::string> extra;
    ByteLevelBpe::Merges merges;
    absl::flat_hash_map<std::string, int> ranks;
    for (int m = 0; m < 40; ++m) {
      const std::string x = tokens[rng() % tokens.size()];
      const std::string y = tokens[rng() % tokens.size()];
      if (ranks.contains(x + " " + y)) continue;
      ranks[x + " " + y] = static_cast<int>(merges.size());
      merges.emplace_back(x, y);
      if (std::find(tokens.begin(), tokens.end(), x + y) == tokens.end()) {
        tokens.push_back(x + y);
        extra.push_back(x + y);
      }
    }
    auto bpe = Make(extra, merges);
    ASSERT_NE(bpe, nullptr);
    for (int trial = 0; trial < 200; ++trial) {
      std::string word;
      for (size_t n = 1 + rng() % 30; n > 0; --n) word.push_back("abcd"[rng() % 4]);
      std::vector<int32_t> expected;
      for (const std::string& piece : ReferenceBpe(word, ranks)) {
        expected.push_back(*bpe->TokenToId(piece));
      }
      ASSERT_EQ(Word(*bpe, word), expected) << "seed " << seed << " word " << word;
    }
  }
}

TEST(ByteLevelBpeTest, IgnoreMergesTakesAWholeWordFromTheVocab) {
  // "abc" is in the vocabulary but no merge path reaches it.
  ByteLevelBpe::Options options;
  options.ignore_merges = true;
  auto bpe = Make({"abc", "ab"}, {{"a", "b"}}, {}, options);
  EXPECT_THAT(Word(*bpe, "abc"), ElementsAre(256));
  EXPECT_THAT(Word(*bpe, "abcab"), ElementsAre(257, 'c', 257));
  auto plain = Make({"abc", "ab"}, {{"a", "b"}});
  EXPECT_THAT(Word(*plain, "abc"), ElementsAre(257, 'c'));
}

TEST(ByteLevelBpeTest, EncodesSpacesAndDecodesBytes) {
  const std::string g = BytesToByteLevel(" ");  // "Ġ"
  auto bpe = Make({g + "w", g + "wo"}, {{g, "w"}, {g + "w", "o"}});
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, bpe->Encode("hi wo\xC3\xA9"));
  EXPECT_THAT(ids, ElementsAre('h', 'i', 257, 0xC3, 0xA9));
  EXPECT_THAT(bpe->Decode(ids), ::meshserve::testing::IsOkAndHolds("hi wo\xC3\xA9"));
  // A token may end inside a character: Decode returns bytes, not text.
  EXPECT_THAT(bpe->Decode({0xC3}), ::meshserve::testing::IsOkAndHolds("\xC3"));
  EXPECT_THAT(bpe->Decode({5, 300}),
              StatusIs(absl::StatusCode::kOutOfRange, "token id 300 at position 1"));
  EXPECT_THAT(bpe->Decode({-1}), StatusIs(absl::StatusCode::kOutOfRange, "token id -1"));
  EXPECT_THAT(bpe->Encode("bad \xFF"), StatusIs(absl::StatusCode::kInvalidArgument, "UTF-8"));
}

TEST(ByteLevelBpeTest, AddedTokensSplitTheText) {
  std::vector<AddedToken> added(3);
  added[0] = {"<|eot|>", 300, true};
  added[1] = {"<L>", 301, true, /*lstrip=*/true, /*rstrip=*/true};
  added[2] = {"cat", 302, false, false, false, /*single_word=*/true};
  auto bpe = Make({}, {}, added);
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, bpe->Encode("a<|eot|>b  <L>  c"));
  EXPECT_THAT(ids, ElementsAre('a', 300, 'b', 301, 'c'));
  // single_word: "cat" alone is the added token, inside "cats" it is not.
  ASSERT_OK_AND_ASSIGN(ids, bpe->Encode("cat cats"));
  EXPECT_THAT(ids, ElementsAre(302, 0x20, 'c', 'a', 't', 's'));
  EXPECT_EQ(bpe->vocab_size(), 303);
  EXPECT_TRUE(bpe->IsSpecial(300));
  EXPECT_FALSE(bpe->IsSpecial(302));
  EXPECT_THAT(bpe->Decode({300, 'x'}), ::meshserve::testing::IsOkAndHolds("<|eot|>x"));
  EXPECT_THAT(bpe->Decode({299}), StatusIs(absl::StatusCode::kOutOfRange, "unassigned"));
}

TEST(ByteLevelBpeTest, CreateRejectsBadTables) {
  EXPECT_THAT(ByteLevelBpe::Create(ByteVocab({"ab"}), {{"a", "x!"}}, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "merge #0 'a x!': its second token 'x!' is not in the vocabulary"));
  EXPECT_THAT(ByteLevelBpe::Create(ByteVocab({}), {{"a", "b"}}, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "the merged token 'ab'"));
  ByteLevelBpe::Vocab dup = ByteVocab({});
  dup.emplace_back("zz", 7);
  EXPECT_THAT(ByteLevelBpe::Create(dup, {}, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "reuses id 7"));
  ByteLevelBpe::Vocab no_space = ByteVocab({});
  no_space.erase(no_space.begin() + ' ');
  EXPECT_THAT(ByteLevelBpe::Create(no_space, {}, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "for byte 0x20"));
  EXPECT_THAT(ByteLevelBpe::Create(ByteVocab({}), {}, {{"<x>", 65, true}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "takes id 65"));
  ByteLevelBpe::Vocab huge = ByteVocab({});
  huge.emplace_back("zz", 1 << 30);
  EXPECT_THAT(ByteLevelBpe::Create(huge, {}, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "has id 1073741824"));
}

TEST(ByteLevelBpeTest, LongWhitespaceRunMergesCompletely) {
  // 200k spaces at the end of text: one pre-token word (the heap loop is O(n log n)).
  const std::string g = BytesToByteLevel(" ");
  auto bpe = Make({g + g, g + g + g + g}, {{g, g}, {g + g, g + g}});
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, bpe->Encode(std::string(200001, ' ')));
  EXPECT_EQ(ids.size(), 50001u);
  EXPECT_EQ(ids.back(), ' ');
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve
