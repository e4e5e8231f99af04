// The MS_LOG / MS_CHECK shim of logging.h: one stderr line per message.
#include "common/base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>  // std::abort
#include <cstring>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace meshserve {
namespace logging_internal {
namespace {

std::atomic<int>& MinSeverity() {
  static std::atomic<int> min{static_cast<int>(Severity::kInfo)};
  return min;
}

}  // namespace

void SetMinLogSeverity(Severity severity) {
  MinSeverity().store(static_cast<int>(severity));
}


bool ShouldLog(Severity severity) {
  return static_cast<int>(severity) >= MinSeverity().load();
}

LogMessage::LogMessage(const char* file, int line, Severity severity)
    : file_(file), line_(line), severity_(severity) {}

LogMessage::~LogMessage() {
  static const char kLetters[] = {'I', 'W', 'E', 'F'};
  const char* base = std::strrchr(file_, '/');
  std::string line = absl::StrCat(
      std::string(1, kLetters[static_cast<int>(severity_)]),
      absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()),
      " ", base ? base + 1 : file_, ":", line_, "] ", stream_.str(), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (severity_ == Severity::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace logging_internal

void SetMinLogSeverityByName(const char* name) {
  using logging_internal::Severity;
  Severity severity = Severity::kInfo;
  if (name != nullptr && std::strcmp(name, "warning") == 0) severity = Severity::kWarning;
  if (name != nullptr && std::strcmp(name, "error") == 0) severity = Severity::kError;
  logging_internal::SetMinLogSeverity(severity);
}

}  // namespace meshserve
