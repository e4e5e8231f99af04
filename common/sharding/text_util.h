// Internal helper for error messages that quote user text.
#ifndef MESHSERVE_COMMON_SHARDING_TEXT_UTIL_H_
#define MESHSERVE_COMMON_SHARDING_TEXT_UTIL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace meshserve {
namespace sharding_internal {

// `text` with printable ASCII kept as is (quotes included, so JAX syntax reads
// naturally) and everything else as \n, \t or \xNN. Cut to `max_chars` input
// characters with "..." appended.
std::string PrintableText(absl::string_view text, size_t max_chars = 200);

}  // namespace sharding_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_TEXT_UTIL_H_
