#include "common/base/checked_math.h"

#include <limits>

#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(CheckedMathTest, CeilAndFloorOfRatio) {
  EXPECT_EQ(CeilOfRatio(7, 2), 4);
  EXPECT_EQ(CeilOfRatio(8, 2), 4);
  EXPECT_EQ(CeilOfRatio(0, 3), 0);
  EXPECT_EQ(FloorOfRatio(7, 2), 3);
}

TEST(CheckedMathTest, MulDetectsOverflow) {
  int64_t out = 0;
  EXPECT_TRUE(CheckedMul(1 << 20, 1 << 20, &out));
  EXPECT_EQ(out, int64_t{1} << 40);
  EXPECT_FALSE(CheckedMul(std::numeric_limits<int64_t>::max(), 2, &out));
}

TEST(CheckedMathTest, AddDetectsOverflow) {
  int64_t out = 0;
  EXPECT_TRUE(CheckedAdd(3, 4, &out));
  EXPECT_EQ(out, 7);
  EXPECT_FALSE(CheckedAdd(std::numeric_limits<int64_t>::max(), 1, &out));
}

}  // namespace
}  // namespace meshserve
