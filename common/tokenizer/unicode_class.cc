// Range-table lookups for unicode_class.h.
//
// Thread-safety: constant tables only.
#include "common/tokenizer/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace meshserve {
namespace tokenizer {
namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

#include "common/tokenizer/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], uint32_t cp) {
  // The first range whose last >= cp; cp is in it when first <= cp.
  const CodePointRange* it = std::lower_bound(
      std::begin(ranges), std::end(ranges), cp,
      [](const CodePointRange& r, uint32_t value) { return r.last < value; });
  return it != std::end(ranges) && it->first <= cp;
}

}  // namespace

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, cp);
}

bool IsWhiteSpace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return InRanges(kWhiteSpaceRanges, cp);
}

}  // namespace tokenizer
}  // namespace meshserve
