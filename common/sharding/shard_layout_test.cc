#include "common/sharding/shard_layout.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

using ::meshserve::testing::ShardingOrDie;

TEST(ShardLayoutTest, ShardIndexIsMixedRadixMajorToMinor) {
  NamedSharding s = ShardingOrDie("mesh[x=2,y=3]", "P(('y', 'x'))", 1);
  // device = x*3 + y; index along dim 0 = y*2 + x.
  for (int64_t device = 0; device < 6; ++device) {
    EXPECT_EQ(ShardIndexAlongDim(s, device, 0), (device % 3) * 2 + device / 3);
  }
}

TEST(ShardLayoutTest, NumpyExampleFromHeader) {
  // x[4 * (dev // 4) : 4 * (dev // 4) + 4, :]
  NamedSharding s = ShardingOrDie("mesh[x=2,y=4]", "P('x', None)", 2);
  for (int64_t dev = 0; dev < 8; ++dev) {
    EXPECT_EQ(ShardBoxForDevice({8, 6}, s, dev),
              Box({{4 * (dev / 4), 4 * (dev / 4) + 4}, {0, 6}}));
  }
}

TEST(ShardLayoutTest, UnevenShardsUseCeilAndClamp) {
  NamedSharding s = ShardingOrDie("mesh[x=4]", "P('x')", 1);
  std::vector<Box> boxes = ShardBoxesByDevice({5}, s);
  EXPECT_THAT(boxes, ElementsAre(Box({{0, 2}}), Box({{2, 4}}), Box({{4, 5}}),
                                 Box({{5, 5}})));
  std::vector<Box> tiny = ShardBoxesByDevice({1}, s);
  EXPECT_THAT(tiny, ElementsAre(Box({{0, 1}}), Box({{1, 1}}), Box({{1, 1}}),
                                Box({{1, 1}})));
}

TEST(ShardLayoutTest, HugeDimsDoNotOverflow) {
  NamedSharding s = ShardingOrDie("mesh[x=3]", "P('x')", 1);
  const int64_t max = std::numeric_limits<int64_t>::max();
  std::vector<Box> boxes = ShardBoxesByDevice({max}, s);
  const int64_t chunk = max / 3 + 1;
  EXPECT_THAT(boxes, ElementsAre(Box({{0, chunk}}), Box({{chunk, 2 * chunk}}),
                                 Box({{2 * chunk, max}})));
}

TEST(ShardLayoutTest, ShardBoxesByDeviceMatchesShardBoxForDevice) {
  NamedSharding s = ShardingOrDie("mesh[a=2,b=3,c=2]", "P('c', ('a', 'b'), None)", 3);
  const std::vector<int64_t> shape = {6, 12, 5};
  std::vector<Box> boxes = ShardBoxesByDevice(shape, s);
  ASSERT_EQ(boxes.size(), 12u);
  for (int64_t d = 0; d < 12; ++d) {
    EXPECT_EQ(boxes[d], ShardBoxForDevice(shape, s, d)) << "device " << d;
  }
}

TEST(ShardLayoutTest, CheckedShardBoxForDeviceRejectsBadInput) {
  NamedSharding s = ShardingOrDie("mesh[x=2]", "P('x')", 1);
  EXPECT_THAT(CheckedShardBoxForDevice({4}, s, 1), IsOkAndHolds(Box({{2, 4}})));
  EXPECT_THAT(CheckedShardBoxForDevice({4}, s, 2),
              StatusIs(absl::StatusCode::kOutOfRange, "device 2"));
  EXPECT_THAT(CheckedShardBoxForDevice({4}, s, -1),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(CheckedShardBoxForDevice({4, 4}, s, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank 2"));
  EXPECT_THAT(CheckedShardBoxForDevice({-4}, s, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "negative"));
}

TEST(ShardLayoutTest, ReplicaGroupsExampleFromHeader) {
  NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('x', None)", 2);
  EXPECT_THAT(ReplicaGroups(s), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
}

TEST(ShardLayoutTest, ReplicaGroupsFullyReplicatedAndFullySharded) {
  EXPECT_THAT(ReplicaGroups(ShardingOrDie("mesh[x=2,y=2]", "P()", 2)),
              ElementsAre(ElementsAre(0, 1, 2, 3)));
  EXPECT_THAT(ReplicaGroups(ShardingOrDie("mesh[x=2,y=2]", "P('y', 'x')", 2)),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                          ElementsAre(3)));
  EXPECT_THAT(ReplicaGroups(NamedSharding()), ElementsAre(ElementsAre(0)));
}

TEST(ShardLayoutTest, ReplicaGroupsAreOrderedByFirstDevice) {
  EXPECT_THAT(ReplicaGroups(ShardingOrDie("mesh[x=2,y=4]", "P(None, 'y')", 2)),
              ElementsAre(ElementsAre(0, 4), ElementsAre(1, 5), ElementsAre(2, 6),
                          ElementsAre(3, 7)));
}

TEST(ShardLayoutTest, UnreducedAxesSplitReplicaGroups) {
  NamedSharding s = ShardingOrDie("mesh[x=2,y=2,z=2]", "P('x', unreduced={'y'})", 1);
  EXPECT_THAT(ReplicaGroups(s), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                                            ElementsAre(4, 5), ElementsAre(6, 7)));
  // ... but do not change a device's box.
  EXPECT_EQ(ShardBoxForDevice({4}, s, 0), ShardBoxForDevice({4}, s, 2));
}

TEST(ShardLayoutTest, DevicesOverlappingBox) {
  NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('x', 'y')", 2);
  EXPECT_THAT(DevicesOverlappingBox({4, 4}, s, Box({{0, 2}, {0, 2}})), ElementsAre(0));
  EXPECT_THAT(DevicesOverlappingBox({4, 4}, s, Box({{1, 3}, {1, 2}})),
              ElementsAre(0, 2));
  EXPECT_THAT(DevicesOverlappingBox({4, 4}, s, Box({{0, 4}, {0, 4}})),
              ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(DevicesOverlappingBox({4, 4}, s, Box({{2, 2}, {0, 4}})),
              ElementsAre());
  EXPECT_THAT(DevicesOverlappingBox({4, 4}, s, Box({{0, 4}})), ElementsAre());
}

}  // namespace
}  // namespace meshserve
