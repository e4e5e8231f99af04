// StopStringMatcher and ValidateStopStrings (stop_strings.h).
#include "common/tokenizer/stop_strings.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {

absl::Status ValidateStopStrings(const std::vector<std::string>& stops, absl::string_view field) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] is empty"));
    }
    absl::Status utf8 = ValidateUtf8(stops[i]);
    if (!utf8.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] is not valid UTF-8: ", utf8.message()));
    }
  }
  return absl::OkStatus();
}

std::string StopStringMatcher::Push(absl::string_view text) {
  if (stopped_) return "";
  held_.append(text.data(), text.size());
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) cut = std::min(cut, held_.find(stop));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // The longest suffix of held_ that is a proper prefix of a stop.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t k = longest; k > keep; --k) {
      if (held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::Finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace tokenizer
}  // namespace meshserve
