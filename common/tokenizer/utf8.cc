// UTF-8 decoding with Python's errors="replace" rule; see utf8.h for the
// table of well-formed sequences and the maximal-subpart rule.
//
// Thread-safety: pure functions; Utf8StreamDecoder is a plain value.
#include "common/tokenizer/utf8.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace meshserve {
namespace tokenizer {
namespace {

bool InRange(unsigned char b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; }

}  // namespace

size_t DecodeLossyInto(absl::string_view bytes, bool hold_truncated_tail, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    bool truncated = false;
    const int len = Utf8SequenceLength(bytes.substr(i), &truncated);
    if (truncated && hold_truncated_tail) break;  // a valid prefix reaching the end
    if (len > 0) {
      out->append(bytes.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      AppendUtf8(kReplacementCharacter, out);
      i += static_cast<size_t>(-len);
    }
  }
  return i;
}

int Utf8SequenceLength(absl::string_view bytes, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  const unsigned char b0 = static_cast<unsigned char>(bytes[0]);
  if (b0 < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (InRange(b0, 0xC2, 0xDF)) {
    need = 2;
  } else if (InRange(b0, 0xE0, 0xEF)) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (InRange(b0, 0xF0, 0xF4)) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;  // 80..BF, C0, C1, F5..FF start nothing
  }
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= bytes.size()) {
      if (truncated != nullptr) *truncated = true;
      return -i;
    }
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (!(i == 1 ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF))) return -i;
  }
  return need;
}

uint32_t DecodeUtf8Sequence(const char* p, int len) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  switch (len) {
    case 1:
      return u[0];
    case 2:
      return ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
    case 3:
      return ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
    default:
      return ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) |
             (u[3] & 0x3Fu);
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string DecodeUtf8Lossy(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  DecodeLossyInto(bytes, /*hold_truncated_tail=*/false, &out);
  return out;
}

absl::Status ValidateUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const int len = Utf8SequenceLength(text.substr(i));
    if (len < 0) {
      const size_t n = std::min<size_t>(4, text.size() - i);
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: ill-formed sequence at byte offset ", i,
                       " (bytes ", absl::BytesToHexString(text.substr(i, n)), ")"));
    }
    i += static_cast<size_t>(len);
  }
  return absl::OkStatus();
}

std::string Utf8StreamDecoder::Push(absl::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  std::string out;
  pending_.erase(0, DecodeLossyInto(pending_, /*hold_truncated_tail=*/true, &out));
  return out;
}

std::string Utf8StreamDecoder::Finish() {
  std::string out = DecodeUtf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tokenizer
}  // namespace meshserve
