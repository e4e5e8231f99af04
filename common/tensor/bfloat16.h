// bfloat16 and float16 <-> float32 conversions.
//
// bfloat16 is the top 16 bits of an IEEE float32 (1 sign, 8 exponent, 7
// mantissa bits). float32 -> bfloat16 rounds to nearest, ties to even (as
// jnp.asarray(x, jnp.bfloat16) / XLA's convert): add 0x7FFF plus the lowest kept
// bit, then truncate. NaN stays NaN (quiet bit set); +-Inf stays Inf; values
// above the largest finite bfloat16 (3.3895e38) round to Inf. bfloat16 ->
// float32 is exact (a shift).
//
//   FloatToBFloat16(1.0f) == 0x3F80;  FloatToBFloat16(1.00390625f) == 0x3F80 (tie,
//   even);  FloatToBFloat16(1.01171875f) == 0x3F82 (tie, rounds up to even).
//
// float16 (IEEE binary16) conversions round to nearest even as well, with
// subnormals, Inf and NaN handled (numpy's float16 semantics).
//
// The array forms are plain loops over integer ops that the compiler
// vectorises; use them in hot paths instead of per-element calls.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_BFLOAT16_H_
#define MESHSERVE_COMMON_TENSOR_BFLOAT16_H_

#include <cstdint>
#include <cstring>

namespace meshserve {

inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

inline float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// dst[i] = FloatToBFloat16(src[i]) for i < n. src and dst must not overlap.
void FloatToBFloat16(const float* src, uint16_t* dst, int64_t n);
// dst[i] = BFloat16ToFloat(src[i]) for i < n. src and dst must not overlap.
void BFloat16ToFloat(const uint16_t* src, float* dst, int64_t n);

// IEEE binary16.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
void FloatToHalf(const float* src, uint16_t* dst, int64_t n);
void HalfToFloat(const uint16_t* src, float* dst, int64_t n);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_BFLOAT16_H_
