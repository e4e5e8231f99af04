#include "server/coordinator/http/status_json.h"

#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using ::meshserve::testing::MeshOrDie;
using ::meshserve::testing::ShardingOrDie;
using ::testing::ElementsAre;

TEST(GridOfShardingTest, RowsAlongDimZeroReplicatedAlongTheOtherAxis) {
  // P('x', None) on (x=2, y=2), shape (8, 8): as visualize.h draws it.
  const NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('x', None)", 2);
  const ShardingGrid g = GridOfSharding({8, 8}, s);
  EXPECT_THAT(g.rows, ElementsAre(Interval{0, 4}, Interval{4, 8}));
  EXPECT_THAT(g.cols, ElementsAre(Interval{0, 8}));
  ASSERT_EQ(g.tiles.size(), 2u);
  EXPECT_THAT(g.tiles[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(g.tiles[1].devices, ElementsAre(2, 3));
  EXPECT_EQ(g.tiles[1].row, 1);
  EXPECT_EQ(g.folded_dims, 0);
}

TEST(GridOfShardingTest, TwoDimensionalTiles) {
  const NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('y', 'x')", 2);
  const ShardingGrid g = GridOfSharding({4, 6}, s);
  EXPECT_THAT(g.rows, ElementsAre(Interval{0, 2}, Interval{2, 4}));
  EXPECT_THAT(g.cols, ElementsAre(Interval{0, 3}, Interval{3, 6}));
  ASSERT_EQ(g.tiles.size(), 4u);
  // Device 1 is (x=0, y=1): row 1 (y), column 0 (x).
  for (const ShardingTile& t : g.tiles) {
    if (t.devices == std::vector<int64_t>{1}) {
      EXPECT_EQ(t.row, 1);
      EXPECT_EQ(t.col, 0);
    }
  }
}

TEST(GridOfShardingTest, RankOneIsOneRowAndRankThreeFolds) {
  const std::string mesh = "mesh[x=2]";
  const ShardingGrid one = GridOfSharding({8}, ShardingOrDie(mesh, "P('x')", 1));
  EXPECT_EQ(one.rows.size(), 1u);
  EXPECT_EQ(one.cols.size(), 2u);
  const ShardingGrid three =
      GridOfSharding({2, 2, 4}, ShardingOrDie(mesh, "P(None, None, 'x')", 3));
  EXPECT_EQ(three.folded_dims, 1);
  ASSERT_EQ(three.tiles.size(), 1u);
  EXPECT_THAT(three.tiles[0].devices, ElementsAre(0, 1));
}

TEST(MeshTextTest, AsStatusWritesIt) {
  EXPECT_EQ(MeshText(MeshOrDie("mesh[data=2,model=4]")), "data=2, model=4");
}

TEST(ClusterStatusJsonTest, WorkersModelsAndRecent) {
  WorkerView w;
  w.info.worker_id = 3;
  w.info.address = "127.0.0.1:9";
  w.info.cores = 2;
  ModelStatus m;
  m.name = "linear";
  m.state = "waiting for workers (0/1)";
  RecentRequest r;
  r.model = "linear";
  r.total_ms = 1.5;
  r.code = absl::StatusCode::kNotFound;
  CoordinatorMetrics metrics;
  metrics.requests.Increment({"linear"}, 2);
  const auto j = nlohmann::json::parse(ClusterStatusJson({w}, {m}, {r}, metrics));
  EXPECT_EQ(j["workers"][0]["id"], 3);
  EXPECT_EQ(j["workers"][0]["alive"], true);
  EXPECT_EQ(j["models"][0]["name"], "linear");
  EXPECT_EQ(j["models"][0]["requests"], 2);
  EXPECT_FALSE(j["models"][0].contains("params"));  // not placed
  EXPECT_EQ(j["recent"][0]["code"], "NOT_FOUND");
}

}  // namespace
}  // namespace meshserve
