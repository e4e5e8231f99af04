// Unicode character classes the pre-tokenizer regexes need: \p{L} (letters,
// general categories Lu Ll Lt Lm Lo), \p{N} (numbers, Nd Nl No) and \s (the
// White_Space property). The tables come from Python's unicodedata through
// gen_unicode_tables.py (unicode_tables.inc; Unicode 14.0 with Debian 12's
// python3), so no ICU is needed. Lookup: ASCII by a fast path, the rest by
// binary search over sorted inclusive [first, last] ranges (O(log #ranges)).
//
// Thread-safety: pure functions over constant tables; safe from any thread.
#ifndef MESHSERVE_COMMON_TOKENIZER_UNICODE_CLASS_H_
#define MESHSERVE_COMMON_TOKENIZER_UNICODE_CLASS_H_

#include <cstdint>

namespace meshserve {
namespace tokenizer {

// True when `cp` is in general category L* (\p{L}).
bool IsLetter(uint32_t cp);
// True when `cp` is in general category N* (\p{N}).
bool IsNumber(uint32_t cp);
// True when `cp` has the White_Space property (\s in Unicode regex engines).
bool IsWhiteSpace(uint32_t cp);

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_UNICODE_CLASS_H_
