#include "common/tensor/bfloat16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}


TEST(BFloat16Test, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1.0e-38f * 0 + 256.0f}) {
    EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(f)), f);
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
}

TEST(BFloat16Test, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (0x3F80) and 0x3F81: even -> 0x3F80.
  EXPECT_EQ(FloatToBFloat16(1.00390625f), 0x3F80);
  // 1 + 3*2^-8 is halfway between 0x3F81 and 0x3F82: even -> 0x3F82.
  EXPECT_EQ(FloatToBFloat16(1.01171875f), 0x3F82);
  // Just above the halfway point rounds up.
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F808001u)), 0x3F81);
  // Just below rounds down.
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F807FFFu)), 0x3F80);
  // Negative values round symmetrically.
  EXPECT_EQ(FloatToBFloat16(-1.01171875f), 0xBF82);
}

TEST(BFloat16Test, SpecialValues) {
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  // A NaN whose payload is only in the low bits must stay NaN.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7F800001u)))));
  // The largest float rounds to Inf; the largest bf16 is exact.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F7F0000u)), 0x7F7F);
  // Subnormals are kept.
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00010000u)), 0x0001);
}

TEST(BFloat16Test, ArrayFormsMatchScalar) {
  std::vector<float> src;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 0x000F0F0Full) {
    src.push_back(FromBits(static_cast<uint32_t>(b)));
  }
  std::vector<uint16_t> dst(src.size());
  FloatToBFloat16(src.data(), dst.data(), static_cast<int64_t>(src.size()));
  std::vector<float> back(src.size());
  BFloat16ToFloat(dst.data(), back.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(dst[i], FloatToBFloat16(src[i])) << i;
    if (!std::isnan(back[i])) {
      EXPECT_EQ(Bits(back[i]), static_cast<uint32_t>(dst[i]) << 16);
    }
  }
}

TEST(BFloat16Test, RoundingErrorIsAtMostHalfUlp) {
  for (uint32_t b = 0x00800000u; b < 0x7F000000u; b += 0x000A1235u) {
    const float f = FromBits(b);
    const float r = BFloat16ToFloat(FloatToBFloat16(f));
    const float ulp = std::ldexp(1.0f, std::ilogb(f) - 7);
    EXPECT_LE(std::fabs(r - f), 0.5f * ulp) << f;
  }
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // halfway to 65536: rounds to Inf
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 * 2^-24: tie -> 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(Float16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace meshserve
