// Splitting text around added tokens; see added_tokens.h for the rules.
//
// Thread-safety: const methods only after construction.
#include "common/tokenizer/added_tokens.h"

#include <algorithm>
#include <utility>

#include "common/tokenizer/unicode_class.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {
namespace {

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Start of the code point that ends right before `pos` (pos > 0).
size_t PrevStart(absl::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && pos - start < 4 && IsContinuationByte(text[start])) --start;
  return start;
}

// The code point at [start, ...) and its length; U+FFFD for an ill-formed byte.
uint32_t CodePointAt(absl::string_view text, size_t start, size_t* len) {
  const int n = Utf8SequenceLength(text.substr(start));
  if (n <= 0) {
    *len = 1;
    return kReplacementCharacter;
  }
  *len = static_cast<size_t>(n);
  return DecodeUtf8Sequence(text.data() + start, n);
}

bool IsWordChar(uint32_t cp) { return cp == '_' || IsLetter(cp) || IsNumber(cp); }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) {
  for (AddedToken& t : tokens) {
    if (!t.content.empty()) tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(
        static_cast<int>(i));
  }
  for (std::vector<int>& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [this](int a, int b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

int AddedTokenMatcher::MatchAt(absl::string_view text, size_t pos) const {
  for (int index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = tokens_[index];
    if (text.substr(pos, t.content.size()) != t.content) continue;
    if (t.single_word) {
      size_t len = 0;
      const size_t end = pos + t.content.size();
      if (pos > 0 && IsWordChar(CodePointAt(text, PrevStart(text, pos), &len))) continue;
      if (end < text.size() && IsWordChar(CodePointAt(text, end, &len))) continue;
    }
    return index;
  }
  return -1;
}

std::vector<TextSegment> AddedTokenMatcher::Split(absl::string_view text) const {
  std::vector<TextSegment> segments;
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const int index = tokens_.empty() ? -1 : MatchAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t begin = pos;
    size_t end = pos + t.content.size();
    size_t len = 0;
    while (t.lstrip && begin > segment_start) {
      const size_t prev = PrevStart(text, begin);
      if (!IsWhiteSpace(CodePointAt(text, prev, &len))) break;
      begin = prev;
    }
    while (t.rstrip && end < text.size() && IsWhiteSpace(CodePointAt(text, end, &len))) {
      end += len;
    }
    if (begin > segment_start) {
      segments.push_back({text.substr(segment_start, begin - segment_start), -1});
    }
    segments.push_back({text.substr(begin, end - begin), t.id});
    segment_start = pos = end;
  }
  if (segment_start < text.size()) {
    segments.push_back({text.substr(segment_start), -1});
  }
  return segments;
}

}  // namespace tokenizer
}  // namespace meshserve
