// Include first in a test that matches Boxes by value (IsOkAndHolds(box)).
//
// GCC 12 reports -Wmaybe-uninitialized inside absl::InlinedVector's move
// constructor when a matcher copies a Box (common/sharding/box.h keeps its
// intervals inline): a false positive, since the move copies the inline
// storage bytes whether or not they are initialized. The pragma has to stand
// before the includes that hold the warning's location, and it holds for the
// rest of the including file only.
//
// Thread-safety: no code.
#ifndef MESHSERVE_TESTS_TESTING_BOX_MATCHER_WARNING_H_
#define MESHSERVE_TESTS_TESTING_BOX_MATCHER_WARNING_H_

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#endif  // MESHSERVE_TESTS_TESTING_BOX_MATCHER_WARNING_H_
