// Stop strings over a streamed completion text (OpenAI's and vLLM's `stop`):
// the text ends just before the first occurrence of any stop string, and a
// stream never emits text it would later have to take back.
//
// Rule. Let T be the concatenation of everything pushed so far and S the set
// of stop strings (each non-empty). The text ends at
//     cut = min over s in S of T.find(s)      (the earliest-starting stop)
// and the output is T[0, cut) -- the stop string and what follows excluded
// (vLLM's include_stop_str_in_output=false). While no stop has occurred, the
// output so far is T minus its longest suffix that is a proper prefix of some
// stop string: that suffix might still become a stop, so it is held back
// until the next Push settles it or Finish releases it.
//   stops {"abc"}:  push "xab" -> "x" (holds "ab"); push "d" -> "abd";
//                   push "xab" then "c!" -> "x", then "" and stopped.
// Why holding the longest such suffix is enough: a stop occurrence that
// starts at position p of T has, at every earlier moment, T[p, end) as a
// prefix of that stop, so p was never emitted.
// UTF-8: stop strings and pushed text are valid UTF-8 (the caller checks
// the stops; the text comes from a Utf8StreamDecoder), so a held suffix
// starts with a stop's first byte, a lead byte: the output never splits a
// character.
//
// Thread-safety: a StopStringMatcher is a value with no internal locking
// (one per stream); ValidateStopStrings is pure.
#ifndef MESHSERVE_COMMON_TOKENIZER_STOP_STRINGS_H_
#define MESHSERVE_COMMON_TOKENIZER_STOP_STRINGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshserve {
namespace tokenizer {

// OK when every stop string is non-empty and valid UTF-8; else
// InvalidArgument naming `field` and the index ("stop[1] is empty").
absl::Status ValidateStopStrings(const std::vector<std::string>& stops, absl::string_view field);

class StopStringMatcher {
 public:
  // `stops` non-empty strings (ValidateStopStrings); none: text passes as is.
  explicit StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends `text`; returns the text now settled (never taken back). After a
  // stop, returns "" for good.
  std::string Push(absl::string_view text);
  // The end of the stream: releases the held-back text ("" after a stop).
  std::string Finish();
  // True once a stop string has occurred.
  bool stopped() const { return stopped_; }
  // Bytes held back (a proper prefix of some stop string).
  size_t num_held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_STOP_STRINGS_H_
