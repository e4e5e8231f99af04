#include "common/sharding/text_util.h"

#include <string>

#include "absl/strings/str_format.h"

namespace meshserve {
namespace sharding_internal {

std::string PrintableText(absl::string_view text, size_t max_chars) {
  std::string out;
  const absl::string_view shown = text.substr(0, max_chars);
  out.reserve(shown.size() + 3);
  for (char c : shown) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u >= 0x7f) {
      out += absl::StrFormat("\\x%02x", u);
    } else {
      out += c;
    }
  }
  if (shown.size() < text.size()) out += "...";
  return out;
}

}  // namespace sharding_internal
}  // namespace meshserve
