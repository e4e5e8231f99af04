// UTF-8 decoding for tokenizers: strict decoding of one code point (for text
// that must be valid, e.g. a prompt to encode) and lossy decoding of token
// bytes to text, replacing each invalid sequence with U+FFFD exactly as
// Python's bytes.decode("utf-8", errors="replace") does.
//
// The replacement rule ("maximal subpart", Unicode 15 §3.9 U+FFFD
// substitution, the W3C/WHATWG and CPython practice): well-formed sequences
// are those of Table 3-7
//     00..7F
//     C2..DF 80..BF
//     E0 A0..BF 80..BF | E1..EC 80..BF 80..BF | ED 80..9F 80..BF | EE..EF 80..BF 80..BF
//     F0 90..BF 80..BF 80..BF | F1..F3 80..BF 80..BF 80..BF | F4 80..8F 80..BF 80..BF
// At an ill-formed position, the longest prefix of a well-formed sequence
// starting there (a lead byte C2..F4 followed by the continuation bytes that
// are still allowed) is replaced by ONE U+FFFD; a byte that cannot start any
// sequence (80..BF, C0, C1, F5..FF) is replaced by one U+FFFD on its own.
// Examples: "E2 82" -> one U+FFFD; "ED A0 80" (a surrogate) -> three; "C0 AF"
// (overlong) -> two; "F4 90 80 80" (> U+10FFFF) -> four.
//
// Streaming (Utf8StreamDecoder): the concatenation of every Push() plus
// Finish() equals DecodeUtf8Lossy of all bytes at once, and no chunk ends in
// the middle of a character: an incomplete but still valid trailing prefix is
// held back until more bytes come or Finish() flushes it as one U+FFFD.
//
// Thread-safety: the free functions are pure; a Utf8StreamDecoder is a value
// with no internal locking (one per stream).
#ifndef MESHSERVE_COMMON_TOKENIZER_UTF8_H_
#define MESHSERVE_COMMON_TOKENIZER_UTF8_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshserve {
namespace tokenizer {

inline constexpr uint32_t kReplacementCharacter = 0xFFFD;

// Length of the well-formed sequence at the start of `bytes` (1..4), or the
// negated length of its maximal subpart when ill-formed (-1..-3; -1 also for
// a byte that starts nothing). `bytes` must be non-empty. When the input ends
// inside a valid prefix, returns the negated prefix length, and sets
// *truncated (if given) to true.
int Utf8SequenceLength(absl::string_view bytes, bool* truncated = nullptr);

// Decodes the well-formed sequence of `len` bytes at `p` (from
// Utf8SequenceLength > 0).
uint32_t DecodeUtf8Sequence(const char* p, int len);

// Appends the UTF-8 encoding of `cp` (<= 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Bytes to text, each maximal ill-formed subpart replaced by U+FFFD.
std::string DecodeUtf8Lossy(absl::string_view bytes);

// DecodeUtf8Lossy appending to `out`; with `hold_truncated_tail`, stops before
// a trailing valid-but-incomplete sequence. Returns the bytes consumed.
size_t DecodeLossyInto(absl::string_view bytes, bool hold_truncated_tail, std::string* out);

// OK when `text` is well-formed UTF-8; otherwise InvalidArgument naming the
// byte offset and the bytes found there.
absl::Status ValidateUtf8(absl::string_view text);

// Incremental form of DecodeUtf8Lossy that never splits a character.
class Utf8StreamDecoder {
 public:
  // Returns the text completed by `bytes` (possibly empty).
  std::string Push(absl::string_view bytes);
  // Flushes a held-back incomplete sequence (as U+FFFD) and resets.
  std::string Finish();
  // Bytes held back, waiting for the rest of a character (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_UTF8_H_
