#include "common/base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace meshserve {
namespace logging_internal {
namespace {

Severity InitialSeverity() {
  const char* env = std::getenv("MESHSERVE_LOG_LEVEL");
  if (env == nullptr) return Severity::kInfo;
  if (std::strcmp(env, "warning") == 0) return Severity::kWarning;
  if (std::strcmp(env, "error") == 0) return Severity::kError;
  return Severity::kInfo;
}

std::atomic<int>& MinSeverity() {
  static std::atomic<int> min{static_cast<int>(InitialSeverity())};
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
}  // namespace meshserve
