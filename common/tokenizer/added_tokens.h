// Added tokens (HF "added_tokens": <|endoftext|>, <|begin_of_text|>, ...) and
// the split of text around them that runs before pre-tokenization.
//
// Matching follows HF tokenizers' AddedVocabulary: leftmost-longest match
// among all added tokens (its Aho-Corasick LeftmostLongest); `lstrip` swallows
// the whitespace before a match, `rstrip` the whitespace after it;
// `single_word` matches only when neither neighbour is a word character
// (letter, number or '_'). Text between matches is encoded by the model.
//
// Thread-safety: an AddedTokenMatcher is immutable after construction.
#ifndef MESHSERVE_COMMON_TOKENIZER_ADDED_TOKENS_H_
#define MESHSERVE_COMMON_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace meshserve {
namespace tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// One piece of split text: a run of ordinary text, or an added token.
struct TextSegment {
  absl::string_view text;
  int32_t added_id = -1;  // >= 0: the piece is this added token
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Tokens with empty content are ignored (they can never match).
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits `text` into ordinary runs and added tokens, in order. Ordinary runs
  // are never empty.
  std::vector<TextSegment> Split(absl::string_view text) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Longest token matching at text[pos] that satisfies single_word, or -1.
  int MatchAt(absl::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  // Indexes into tokens_ by first byte, longest content first.
  std::array<std::vector<int>, 256> by_first_byte_;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_ADDED_TOKENS_H_
