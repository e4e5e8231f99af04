// Integer helpers for shapes and byte counts (cf. tensorstore util/division.h).
//
//   CeilOfRatio(7, 2) == 4, FloorOfRatio(7, 2) == 3  (for b > 0, a >= 0)
//   CheckedMul/CheckedAdd return false on int64 overflow instead of wrapping.
#ifndef MESHSERVE_COMMON_BASE_CHECKED_MATH_H_
#define MESHSERVE_COMMON_BASE_CHECKED_MATH_H_

#include <cstdint>

namespace meshserve {

constexpr int64_t CeilOfRatio(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t FloorOfRatio(int64_t a, int64_t b) { return a / b; }

// Sets *out = a * b and returns true, or returns false on overflow.
inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Sets *out = a + b and returns true, or returns false on overflow.
inline bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_CHECKED_MATH_H_
