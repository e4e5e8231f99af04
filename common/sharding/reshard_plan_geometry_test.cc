#include "common/sharding/reshard_plan_geometry.h"

#include <random>
#include <vector>

#include "common/sharding/testing/fixtures.h"
#include "gtest/gtest.h"
#include "common/sharding/shard_layout.h"

namespace meshserve {
namespace reshard_internal {
namespace {

using ::meshserve::testing::ShardingOrDie;

TEST(ShardGridTest, AgreesWithShardLayoutOnEveryDevice) {
  const std::vector<int64_t> shapes[] = {{8, 6}, {5, 7}, {0, 3}, {12, 12}};
  const char* specs[] = {"P()", "P('x')", "P(None, 'y')", "P(('y', 'x'))",
                         "P('z', ('x', 'y'))", "P('y', 'x', unreduced={'z'})"};
  for (const auto& shape : shapes) {
    for (const char* spec : specs) {
      const NamedSharding s = ShardingOrDie("mesh[x=2,y=3,z=2]", spec, 2);
      absl::StatusOr<ShardGrid> grid = ShardGrid::Create(shape, s);
      ASSERT_TRUE(grid.ok()) << grid.status();
      for (int64_t d = 0; d < s.mesh().num_devices(); ++d) {
        EXPECT_EQ(grid->ShardBox(grid->device_shard()[d]), ShardBoxForDevice(shape, s, d))
            << spec << " device " << d;
      }
    }
  }
}

TEST(ShardGridTest, RejectsRankMismatchAndUnknownAxis) {
  const NamedSharding s = ShardingOrDie("mesh[x=2]", "P('x', None)", 2);
  EXPECT_EQ(ShardGrid::Create({4}, s).status().code(), absl::StatusCode::kInvalidArgument);
  const NamedSharding bad =
      NamedSharding::UncheckedCreate(*ParseMesh("mesh[x=2]"), PartitionSpec({{"q"}}));
  EXPECT_EQ(ShardGrid::Create({4}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PartialIndexTest, MixedRadixOverTheGivenAxes) {
  const Mesh mesh = *ParseMesh("mesh[a=2,b=3,c=2]");
  const std::vector<int64_t> g = PartialIndexByDevice(mesh, {0, 2});
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    EXPECT_EQ(g[d], CoordAlongAxis(mesh, d, 0) * 2 + CoordAlongAxis(mesh, d, 2));
  }
}

TEST(OverlapsAlongDimTest, MergesTwoPartitionsLinearly) {
  std::mt19937_64 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t d = std::uniform_int_distribution<int64_t>(0, 13)(gen);
    const int64_t ks = std::uniform_int_distribution<int64_t>(1, 6)(gen);
    const int64_t kd = std::uniform_int_distribution<int64_t>(1, 6)(gen);
    const Mesh mesh = *Mesh::Create({{"s", ks}, {"t", kd}});
    const NamedSharding src = *NamedSharding::Create(mesh, *ParsePartitionSpec("P('s')"), 1);
    const NamedSharding dst = *NamedSharding::Create(mesh, *ParsePartitionSpec("P('t')"), 1);
    const ShardGrid a = *ShardGrid::Create({d}, src);
    const ShardGrid b = *ShardGrid::Create({d}, dst);
    const std::vector<DimOverlap> got = OverlapsAlongDim(a, b, 0);
    std::vector<DimOverlap> want;
    for (int64_t i = 0; i < ks; ++i) {
      for (int64_t j = 0; j < kd; ++j) {
        const Interval both = Intersect(a.ShardInterval(0, i), b.ShardInterval(0, j));
        if (!both.empty()) want.push_back(DimOverlap{i, j, both});
      }
    }
    ASSERT_EQ(got.size(), want.size()) << "d=" << d << " ks=" << ks << " kd=" << kd;
    EXPECT_LE(static_cast<int64_t>(got.size()), ks + kd - 1);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].src_shard, want[k].src_shard);
      EXPECT_EQ(got[k].dst_shard, want[k].dst_shard);
      EXPECT_EQ(got[k].interval, want[k].interval);
    }
  }
}

}  // namespace
}  // namespace reshard_internal
}  // namespace meshserve
