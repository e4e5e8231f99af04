// HostMemoryBytes (host_memory.h).
#include "common/base/host_memory.h"

#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/base/file_io.h"

namespace meshserve {

int64_t HostMemoryBytes() {
  absl::StatusOr<std::string> meminfo = ReadFileToString("/proc/meminfo");
  if (meminfo.ok()) {
    for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
      if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
      line = absl::StripAsciiWhitespace(line);
      int64_t kib = 0;
      if (absl::ConsumeSuffix(&line, "kB") &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) && kib > 0) {
        return kib * 1024;
      }
      break;
    }
  }
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace meshserve
