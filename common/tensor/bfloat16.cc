#include "common/tensor/bfloat16.h"

#include <cstring>

namespace meshserve {

void FloatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    const bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
    const uint32_t quiet = bits | 0x00400000u;
    dst[i] = static_cast<uint16_t>((is_nan ? quiet : rounded) >> 16);
  }
}

void BFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;  // NaN
  if (abs >= 0x47800000u) {                       // >= 65536: Inf (or rounds to it)
    return sign | 0x7C00u;
  }
  if (abs >= 0x38800000u) {  // normal half (>= 2^-14)
    // Rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
    uint32_t h = abs - 0x38000000u;
    h += 0x0FFFu + ((h >> 13) & 1u);
    return sign | static_cast<uint16_t>(h >> 13);  // may carry into Inf: correct
  }
  if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero
  // Subnormal half: value = m * 2^-24, m in [0, 1024].
  const uint32_t exp = abs >> 23;                  // 102..112
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exp;                // 14..24
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;
  return sign | static_cast<uint16_t>(m);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    uint32_t m = mant;
    int e = -1;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400u) == 0);
    bits = sign | ((112u - e) << 23) | ((m & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void FloatToHalf(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

void HalfToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

}  // namespace meshserve
