// Hand-written matchers for the GPT-2 and Llama 3 pre-tokenizer regexes; see
// pretokenizer.h for the patterns and the backtracking cases.
//
// Each matcher returns the length, in code points, of the match at position
// i (always >= 1 because every character matches some alternative).
//
// Thread-safety: pure functions.
#include "common/tokenizer/pretokenizer.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode_class.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {

const char kGpt2PatternText[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3PatternText[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using CodePoints = std::vector<uint32_t>;

bool IsOther(uint32_t cp) { return !IsWhiteSpace(cp) && !IsLetter(cp) && !IsNumber(cp); }
bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t AsciiLower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// Length of the run of code points satisfying `pred` from i.
template <typename Pred>
size_t Run(const CodePoints& cps, size_t i, Pred pred) {
  size_t j = i;
  while (j < cps.size() && pred(cps[j])) ++j;
  return j - i;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive: match length or 0.
size_t MatchContraction(const CodePoints& cps, size_t i, bool fold) {
  if (cps[i] != '\'' || i + 1 >= cps.size()) return 0;
  auto at = [&](size_t k) -> uint32_t {
    if (i + k >= cps.size()) return 0;
    return fold ? AsciiLower(cps[i + k]) : cps[i + k];
  };
  const uint32_t c1 = at(1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if ((c1 == 'r' || c1 == 'v') && at(2) == 'e') return 3;
  if (c1 == 'l' && at(2) == 'l') return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace position i.
size_t MatchTrailingWhitespace(const CodePoints& cps, size_t i) {
  const size_t n = Run(cps, i, IsWhiteSpace);
  if (i + n == cps.size() || n == 1) return n;
  return n - 1;  // leave the last space to prefix the next word
}

size_t MatchGpt2(const CodePoints& cps, size_t i) {
  if (size_t n = MatchContraction(cps, i, /*fold=*/false)) return n;
  const size_t sp = (cps[i] == ' ' && i + 1 < cps.size()) ? 1 : 0;
  for (bool (*cls)(uint32_t) : {IsLetter, IsNumber, IsOther}) {
    if (sp == 1 && cls(cps[i + 1])) return 1 + Run(cps, i + 1, cls);
    if (cls(cps[i])) return Run(cps, i, cls);
  }
  return MatchTrailingWhitespace(cps, i);
}

size_t MatchLlama3(const CodePoints& cps, size_t i) {
  if (size_t n = MatchContraction(cps, i, /*fold=*/true)) return n;
  const uint32_t c = cps[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!IsNewline(c) && !IsLetter(c) && !IsNumber(c) && i + 1 < cps.size() &&
      IsLetter(cps[i + 1])) {
    return 1 + Run(cps, i + 1, IsLetter);
  }
  if (IsLetter(c)) return Run(cps, i, IsLetter);
  // \p{N}{1,3}
  if (IsNumber(c)) return std::min<size_t>(3, Run(cps, i, IsNumber));
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t sp = (c == ' ' && i + 1 < cps.size() && IsOther(cps[i + 1])) ? 1 : 0;
  if (sp == 1 || IsOther(c)) {
    size_t n = sp + Run(cps, i + sp, IsOther);
    return n + Run(cps, i + n, IsNewline);
  }
  // \s*[\r\n]+ : through the last newline of the whitespace run.
  const size_t ws = Run(cps, i, IsWhiteSpace);
  for (size_t k = ws; k > 0; --k) {
    if (IsNewline(cps[i + k - 1])) return k;
  }
  return MatchTrailingWhitespace(cps, i);
}

}  // namespace

absl::StatusOr<SplitPattern> SplitPatternFromRegex(absl::string_view regex) {
  if (regex == kGpt2PatternText) return SplitPattern::kGpt2;
  if (regex == kLlama3PatternText) return SplitPattern::kLlama3;
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported pre-tokenizer regex '", absl::CEscape(regex),
      "': only GPT-2's and Llama 3's patterns are implemented"));
}

absl::StatusOr<std::vector<absl::string_view>> PreTokenize(absl::string_view text,
                                                            SplitPattern pattern) {
  MS_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<absl::string_view> words;
  if (text.empty()) return words;
  if (pattern == SplitPattern::kNone) {
    words.push_back(text);
    return words;
  }
  CodePoints cps;
  std::vector<size_t> offsets;  // byte offset of each code point, then text.size()
  cps.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (size_t b = 0; b < text.size();) {
    const int len = Utf8SequenceLength(text.substr(b));  // > 0: validated above
    offsets.push_back(b);
    cps.push_back(DecodeUtf8Sequence(text.data() + b, len));
    b += static_cast<size_t>(len);
  }
  offsets.push_back(text.size());
  for (size_t i = 0; i < cps.size();) {
    const size_t n = pattern == SplitPattern::kGpt2 ? MatchGpt2(cps, i) : MatchLlama3(cps, i);
    words.push_back(text.substr(offsets[i], offsets[i + n] - offsets[i]));
    i += n;
  }
  return words;
}

}  // namespace tokenizer
}  // namespace meshserve
