// Status propagation macros. Abseil 20220623 has none, so these follow the
// names and semantics of the later ABSL_RETURN_IF_ERROR / ABSL_ASSIGN_OR_RETURN:
// swapping them is a search-and-replace.
//
//   MS_RETURN_IF_ERROR(DoThing());
//   MS_RETURN_IF_ERROR(DoThing(), "while loading layer '", name, "'");
//   MS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(...));
//   MS_ASSIGN_OR_RETURN(auto spec, ParsePartitionSpec(text), "input 'x'");
//
// The optional trailing arguments are StrCat'ed into a prefix "<prefix>: " on the
// returned status' message; the code is kept.
#ifndef MESHSERVE_COMMON_BASE_STATUS_MACROS_H_
#define MESHSERVE_COMMON_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/status_util.h"

#define MS_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define MS_STATUS_MACROS_CONCAT_(x, y) MS_STATUS_MACROS_CONCAT_INNER_(x, y)

#define MS_RETURN_IF_ERROR(expr, ...)                                       \
  do {                                                                      \
    ::absl::Status ms_status_ = (expr);                                     \
    if (ABSL_PREDICT_FALSE(!ms_status_.ok())) {                             \
      return ::meshserve::AnnotateStatus(std::move(ms_status_), ##__VA_ARGS__); \
    }                                                                       \
  } while (false)

#define MS_ASSIGN_OR_RETURN(lhs, rexpr, ...)                                 \
  MS_ASSIGN_OR_RETURN_IMPL_(                                                 \
      MS_STATUS_MACROS_CONCAT_(ms_statusor_, __LINE__), lhs, rexpr, ##__VA_ARGS__)

#define MS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr, ...)                 \
  auto statusor = (rexpr);                                                   \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                                  \
    return ::meshserve::AnnotateStatus(std::move(statusor).status(),         \
                                       ##__VA_ARGS__);                       \
  }                                                                          \
  lhs = *std::move(statusor)

#endif  // MESHSERVE_COMMON_BASE_STATUS_MACROS_H_
