// The two bracketed text forms of a shape, in one place (the Python-tuple
// form "(8, 2)" of JAX's messages is PyTupleRepr in common/sharding/repr.h).
//
//   ShapeToString({8, 2})         "[8, 2]"   error messages about tensors
//   ShapeToCompactString({8, 2})  "[8,2]"    the dims of a type string
//                                            ("float32[8,2]"), as JAX prints it
// Both print "[]" for rank 0.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_BASE_SHAPE_STRING_H_
#define MESHSERVE_COMMON_BASE_SHAPE_STRING_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace meshserve {

inline std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

inline std::string ShapeToCompactString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_SHAPE_STRING_H_
