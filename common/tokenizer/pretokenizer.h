// Regex pre-tokenizers of byte-level BPE tokenizers, matched by hand (no regex
// engine): the text is cut into "words" before BPE runs on each word's bytes.
// Two patterns are known, recognised by their exact source text:
//
//   kGpt2   (GPT-2; HF ByteLevel pre-tokenizer with use_regex=true)
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3 (Llama 3 / tiktoken cl100k-style; HF Split pre-tokenizer)
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kNone   the whole text is one word (ByteLevel with use_regex=false alone)
//
// Semantics are those of a backtracking engine finding successive leftmost
// matches, alternatives tried in order (Python's `regex`, Oniguruma, JS /u).
// Every character matches some alternative, so the words tile the text. Two
// backtracking cases, worked out:
//   \s+(?!\S)   a whitespace run of length n followed by a non-space matches
//               its first n-1 characters (n >= 2); at the end of text, all n.
//   \s*[\r\n]+  matches up to and including the LAST \r or \n of the run.
// Case-insensitive contractions of kLlama3 fold ASCII only ('S, 'RE...).
// Classes come from unicode_class.h (Unicode 14.0).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TOKENIZER_PRETOKENIZER_H_
#define MESHSERVE_COMMON_TOKENIZER_PRETOKENIZER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {
namespace tokenizer {

enum class SplitPattern { kNone, kGpt2, kLlama3 };

// The regex source texts recognised (as they appear in a tokenizer.json, after
// JSON unescaping).
extern const char kGpt2PatternText[];
extern const char kLlama3PatternText[];

// The pattern whose source is `regex`; InvalidArgument naming it otherwise.
absl::StatusOr<SplitPattern> SplitPatternFromRegex(absl::string_view regex);

// Cuts `text` into words per `pattern`. Pieces point into `text`. InvalidArgument
// when `text` is not valid UTF-8.
absl::StatusOr<std::vector<absl::string_view>> PreTokenize(absl::string_view text,
                                                            SplitPattern pattern);

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_PRETOKENIZER_H_
