#include "common/sharding/visualize.h"

#include <string>

#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

using ::meshserve::testing::ShardingOrDie;

// Expected texts below are JAX's VisualizeShardingTest cases
// (tests/debugging_primitives_test.py).

TEST(VisualizeShardingTest, TrivialSharding) {
  EXPECT_THAT(VisualizeSharding({5}, ShardingOrDie("mesh[x=1]", "P('x')", 1)),
              IsOkAndHolds("┌───────┐\n"
                           "│ CPU 0 │\n"
                           "└───────┘\n"));
}

TEST(VisualizeShardingTest, TrivialShardingWithScale) {
  VisualizeOptions options;
  options.scale = 8;
  EXPECT_THAT(
      VisualizeSharding({5}, ShardingOrDie("mesh[x=1]", "P('x')", 1), options),
      IsOkAndHolds("┌──────────────────────────────────────┐\n"
                   "│                CPU 0                 │\n"
                   "└──────────────────────────────────────┘\n"));
}

TEST(VisualizeShardingTest, FullSharding) {
  const std::string rule = "├───────┼───────┼───────┼───────┤\n";
  EXPECT_THAT(
      VisualizeSharding({8, 8}, ShardingOrDie("mesh[x=8,y=4]", "P('x', 'y')", 2)),
      IsOkAndHolds("┌───────┬───────┬───────┬───────┐\n"
                   "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │\n" + rule +
                   "│ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │\n" + rule +
                   "│ CPU 8 │ CPU 9 │CPU 10 │CPU 11 │\n" + rule +
                   "│CPU 12 │CPU 13 │CPU 14 │CPU 15 │\n" + rule +
                   "│CPU 16 │CPU 17 │CPU 18 │CPU 19 │\n" + rule +
                   "│CPU 20 │CPU 21 │CPU 22 │CPU 23 │\n" + rule +
                   "│CPU 24 │CPU 25 │CPU 26 │CPU 27 │\n" + rule +
                   "│CPU 28 │CPU 29 │CPU 30 │CPU 31 │\n"
                   "└───────┴───────┴───────┴───────┘\n"));
}

TEST(VisualizeShardingTest, ShardingWithReplicatedRows) {
  const std::string rule = "├───────────────────────┤\n";
  EXPECT_THAT(
      VisualizeSharding({8, 8}, ShardingOrDie("mesh[x=8,y=4]", "P('x', None)", 2)),
      IsOkAndHolds("┌───────────────────────┐\n"
                   "│      CPU 0,1,2,3      │\n" + rule +
                   "│      CPU 4,5,6,7      │\n" + rule +
                   "│     CPU 8,9,10,11     │\n" + rule +
                   "│    CPU 12,13,14,15    │\n" + rule +
                   "│    CPU 16,17,18,19    │\n" + rule +
                   "│    CPU 20,21,22,23    │\n" + rule +
                   "│    CPU 24,25,26,27    │\n" + rule +
                   "│    CPU 28,29,30,31    │\n"
                   "└───────────────────────┘\n"));
}

TEST(VisualizeShardingTest, ShardingWithReplicatedColumns) {
  const std::string blank = "│           │           │\n";
  std::string want = "┌───────────┬───────────┐\n";
  for (int i = 0; i < 4; ++i) want += blank;
  want += "│CPU 0,2,4,6│CPU 1,3,5,7│\n";
  for (int i = 0; i < 4; ++i) want += blank;
  want += "└───────────┴───────────┘\n";
  EXPECT_THAT(
      VisualizeSharding({8, 8}, ShardingOrDie("mesh[x=4,y=2]", "P(None, 'y')", 2)),
      IsOkAndHolds(want));
}

TEST(VisualizeShardingTest, HeaderExample) {
  const std::string blank = "│                       │\n";
  EXPECT_THAT(
      VisualizeSharding({8, 8}, ShardingOrDie("mesh[x=2,y=2]", "P('x', None)", 2)),
      IsOkAndHolds("┌───────────────────────┐\n" + blank +
                   "│        CPU 0,1        │\n" + blank + blank +
                   "├───────────────────────┤\n" + blank +
                   "│        CPU 2,3        │\n" + blank + blank +
                   "└───────────────────────┘\n"));
}

TEST(VisualizeShardingTest, UnevenTilesGetTheirOwnSizes) {
  // Shape 5 over 4 shards: chunks of 2, 2, 1 and an empty one; every tile is at
  // least min_width and the empty shard is still drawn.
  ASSERT_OK_AND_ASSIGN(std::string text,
                       VisualizeSharding({5}, ShardingOrDie("mesh[x=4]", "P('x')", 1)));
  EXPECT_THAT(text, ::testing::HasSubstr("│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │"));
}

TEST(VisualizeShardingTest, WideArrayIsClampedToMaxWidth) {
  ASSERT_OK_AND_ASSIGN(
      std::string text,
      VisualizeSharding({128, 10000}, ShardingOrDie("mesh[x=8,y=4]", "P('x', None)", 2)));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "│                                 CPU 0,1,2,3       "
                        "                           │\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "│                               CPU 28,29,30,31     "
                        "                           │\n"));
}

TEST(VisualizeShardingTest, OneDimensionalRow) {
  EXPECT_THAT(
      VisualizeSharding({8}, ShardingOrDie("mesh[x=8]", "P('x')", 1)),
      IsOkAndHolds(
          "┌───────┬───────┬───────┬───────┬───────┬───────┬───────┬───────┐\n"
          "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │\n"
          "└───────┴───────┴───────┴───────┴───────┴───────┴───────┴───────┘\n"));
}

TEST(VisualizeShardingTest, PlatformLabel) {
  EXPECT_THAT(VisualizeSharding({4}, ShardingOrDie("mesh[x=2]", "P()", 1), "TPU"),
              IsOkAndHolds("┌───────┐\n"
                           "│TPU 0,1│\n"
                           "└───────┘\n"));
}

TEST(VisualizeShardingTest, RejectsOtherRanks) {
  EXPECT_THAT(VisualizeSharding({2, 2, 2}, ShardingOrDie("mesh[x=2]", "P()", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "`visualize_sharding` only works for shapes with 1 and 2 "
                       "dimensions. Got shape (2, 2, 2)"));
  EXPECT_THAT(VisualizeSharding({}, NamedSharding()),
              StatusIs(absl::StatusCode::kInvalidArgument, "Got shape ()"));
}

TEST(VisualizeShardingTest, RejectsBadInput) {
  EXPECT_THAT(VisualizeSharding({4, 4}, ShardingOrDie("mesh[x=2]", "P()", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "does not match"));
  EXPECT_THAT(VisualizeSharding({0}, ShardingOrDie("mesh[x=2]", "P()", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "(0,)"));
  VisualizeOptions options;
  options.scale = -1;
  EXPECT_THAT(VisualizeSharding({4}, ShardingOrDie("mesh[x=2]", "P()", 1), options),
              StatusIs(absl::StatusCode::kInvalidArgument, "scale=-1"));
}

}  // namespace
}  // namespace meshserve
