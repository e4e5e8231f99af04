// A small CHECK/DCHECK/LOG shim: absl/log is missing from abseil 20220623.
//
// CHECK and DCHECK guard internal invariants only, never anything that came
// from a request, file, flag or peer (return a Status for those).
//
//   MS_CHECK(cond) << "extra context";
//   MS_DCHECK(cond);
//   MS_LOG(INFO) << "worker " << id << " ready";   // INFO, WARNING, ERROR
//
// Thread-safety: thread-safe (one write per message; the level is atomic).
#ifndef MESHSERVE_COMMON_BASE_LOGGING_H_
#define MESHSERVE_COMMON_BASE_LOGGING_H_

#include <sstream>
#include <string>

namespace meshserve {
namespace logging_internal {

enum class Severity { kInfo, kWarning, kError, kFatal };

// Accumulates one message; writes it to stderr (one line, with a severity
// letter and the source location) on destruction, and aborts for kFatal.
class LogMessage {
 public:
  LogMessage(const char* file, int line, Severity severity);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  Severity severity_;
  std::ostringstream stream_;
};

// Swallows a stream expression in a `cond ? (void)0 : Voidify() & stream` form.
struct Voidify {
  void operator&(std::ostream&) {}
};

// Sets the minimum severity printed (default kInfo). The binaries' mains set
// it from MESHSERVE_LOG_LEVEL with SetMinLogSeverityByName.
void SetMinLogSeverity(Severity severity);
bool ShouldLog(Severity severity);

}  // namespace logging_internal

// The minimum severity printed by name, as MESHSERVE_LOG_LEVEL writes it:
// "warning" or "error"; null or anything else prints everything (info).
void SetMinLogSeverityByName(const char* name);
}  // namespace meshserve

#define MS_LOG_SEVERITY_INFO ::meshserve::logging_internal::Severity::kInfo
#define MS_LOG_SEVERITY_WARNING ::meshserve::logging_internal::Severity::kWarning
#define MS_LOG_SEVERITY_ERROR ::meshserve::logging_internal::Severity::kError

#define MS_LOG(severity)                                                   \
  !::meshserve::logging_internal::ShouldLog(MS_LOG_SEVERITY_##severity)    \
      ? (void)0                                                            \
      : ::meshserve::logging_internal::Voidify() &                         \
            ::meshserve::logging_internal::LogMessage(                     \
                __FILE__, __LINE__, MS_LOG_SEVERITY_##severity)            \
                .stream()

#define MS_CHECK(cond)                                                     \
  (cond) ? (void)0                                                         \
         : ::meshserve::logging_internal::Voidify() &                      \
               ::meshserve::logging_internal::LogMessage(                  \
                   __FILE__, __LINE__,                                     \
                   ::meshserve::logging_internal::Severity::kFatal)        \
                       .stream()                                           \
                   << "Check failed: " #cond " "

#ifdef NDEBUG
#define MS_DCHECK(cond) \
  while (false) MS_CHECK(cond)
#else
#define MS_DCHECK(cond) MS_CHECK(cond)
#endif

#endif  // MESHSERVE_COMMON_BASE_LOGGING_H_
