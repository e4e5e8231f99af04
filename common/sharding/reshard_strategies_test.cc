// The planner's strategies (reshard_strategies.h): MinimumCover, the exact
// minimum set cover over partial sums.
#include "common/sharding/reshard_strategies.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(MinimumCoverTest, FindsTheOptimumWhereGreedyFails) {
  // Greedy takes the widest mask {0,1,2,3} first and then needs two more.
  const std::vector<uint64_t> masks = {0b001111, 0b010011, 0b101100};
  std::vector<int> cover = reshard_internal::MinimumCover(0b111111, masks);
  EXPECT_THAT(cover, ::testing::UnorderedElementsAre(1, 2));
}

TEST(MinimumCoverTest, DisjointMasksAreAllNeeded) {
  std::vector<uint64_t> masks;
  for (int g = 0; g < 64; ++g) masks.push_back(uint64_t{1} << g);
  masks.push_back(0);
  EXPECT_EQ(reshard_internal::MinimumCover(~uint64_t{0} << 1, masks).size(), 63u);
}

TEST(MinimumCoverTest, IgnoresBitsOutsideTheTarget) {
  EXPECT_THAT(reshard_internal::MinimumCover(0b0110, {0b0011, 0b1100}),
              ::testing::ElementsAre(0, 1));
}

TEST(MinimumCoverTest, EmptyTargetNeedsNothing) {
  EXPECT_TRUE(reshard_internal::MinimumCover(0, {0b1}).empty());
}

TEST(MinimumCoverTest, PrefersEarlierMasks) {
  EXPECT_THAT(reshard_internal::MinimumCover(0b11, {0b01, 0b11, 0b11}),
              ::testing::ElementsAre(1));
}

}  // namespace
}  // namespace meshserve
