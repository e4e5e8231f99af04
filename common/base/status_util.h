// Helpers for building and annotating absl::Status values.
#ifndef MESHSERVE_COMMON_BASE_STATUS_UTIL_H_
#define MESHSERVE_COMMON_BASE_STATUS_UTIL_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// Returns `status` unchanged (no prefix given).
inline absl::Status AnnotateStatus(absl::Status status) { return status; }

// Returns a status with the same code whose message is "<prefix>: <message>",
// where prefix is the StrCat of `parts`. OK stays OK.
template <typename... Parts>
absl::Status AnnotateStatus(absl::Status status, const Parts&... parts) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(parts..., ": ", status.message()));
}

// Message-building shorthands: InvalidArgumentError(StrCat(parts...)) etc.
template <typename... Parts>
absl::Status InvalidArgument(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status OutOfRange(const Parts&... parts) {
  return absl::OutOfRangeError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status NotFound(const Parts&... parts) {
  return absl::NotFoundError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status FailedPrecondition(const Parts&... parts) {
  return absl::FailedPreconditionError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status Unimplemented(const Parts&... parts) {
  return absl::UnimplementedError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status Unavailable(const Parts&... parts) {
  return absl::UnavailableError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status ResourceExhausted(const Parts&... parts) {
  return absl::ResourceExhaustedError(absl::StrCat(parts...));
}
template <typename... Parts>
absl::Status Internal(const Parts&... parts) {
  return absl::InternalError(absl::StrCat(parts...));
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_STATUS_UTIL_H_
