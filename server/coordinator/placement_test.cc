#include "server/coordinator/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

ModelFile Model(std::vector<std::pair<std::string, int64_t>> axes) {
  ModelFile m;
  m.name = "m";
  m.mesh_axes = std::move(axes);
  return m;
}

std::vector<PlacementWorker> Workers(int n) {
  std::vector<PlacementWorker> w;
  for (int i = 0; i < n; ++i) w.push_back({10 + i, "h:" + std::to_string(i)});
  return w;
}

TEST(PlacementTest, MinusOneAxisTakesTheRest) {
  ASSERT_OK_AND_ASSIGN(Placement p,
                       ComputePlacement(Model({{"data", -1}, {"model", 2}}), Workers(8), 5));
  EXPECT_EQ(p.mesh.ToString(), "mesh[data=4,model=2]");
  EXPECT_EQ(p.generation, 5);
  EXPECT_THAT(p.device_workers, ElementsAre(10, 11, 12, 13, 14, 15, 16, 17));
}

TEST(PlacementTest, ReplicasHoldTheNextWorkersDevices) {
  ASSERT_OK_AND_ASSIGN(Placement p,
                       ComputePlacement(Model({{"fsdp", 2}, {"model", 4}}), Workers(3), 1, 1));
  EXPECT_EQ(p.version, 1);
  EXPECT_THAT(p.ReplicaDevices(10), ElementsAre(3, 4, 5));
  EXPECT_THAT(p.ReplicaDevices(11), ElementsAre(6, 7));
  EXPECT_THAT(p.ReplicaDevices(12), ElementsAre(0, 1, 2));
  EXPECT_EQ(p.ToString(),
            "gen 1 v1 mesh[fsdp=2,model=4] workers {10: devices 0-2, 11: devices 3-5, "
            "12: devices 6-7} replicas {10: 3-5, 11: 6-7, 12: 0-2}");
  ASSERT_OK_AND_ASSIGN(Placement none,
                       ComputePlacement(Model({{"fsdp", 2}, {"model", 4}}), Workers(3), 1, 0));
  EXPECT_TRUE(none.replica_devices_by_worker.empty());
  EXPECT_FALSE(none.SameLayoutAs(p));
  // One worker has no other worker to copy.
  ASSERT_OK_AND_ASSIGN(Placement one,
                       ComputePlacement(Model({{"fsdp", 2}, {"model", 4}}), Workers(1), 1, 1));
  EXPECT_TRUE(one.replica_devices_by_worker.empty());
  EXPECT_THAT(ComputePlacement(Model({{"data", -1}}), Workers(2), 1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, "replicas must be 0 or 1, got 2"));
}

TEST(PlacementTest, FixedMeshOnFewerWorkersUsesContiguousBlocks) {
  ASSERT_OK_AND_ASSIGN(Placement p,
                       ComputePlacement(Model({{"fsdp", 2}, {"model", 4}}), Workers(3), 1));
  EXPECT_THAT(p.device_workers, ElementsAre(10, 10, 10, 11, 11, 11, 12, 12));
  EXPECT_THAT(p.devices_by_worker.at(12), ElementsAre(6, 7));
  EXPECT_EQ(DeviceCoordsString(p.mesh, 6), "fsdp=1,model=2");
}

TEST(PlacementTest, MoreWorkersThanDevicesLeavesSomeIdle) {
  ASSERT_OK_AND_ASSIGN(Placement p, ComputePlacement(Model({{"data", 2}}), Workers(5), 1));
  EXPECT_THAT(p.device_workers, ElementsAre(10, 11));
  EXPECT_EQ(p.worker_addresses.size(), 2u);
}

TEST(PlacementTest, MinusOneFallsBackToAWorkerCountThatDivides) {
  // model=2 fixed, data=-1: 3 workers cannot hold data*2 devices one each, so
  // the mesh is sized for 2 workers.
  ASSERT_OK_AND_ASSIGN(Placement p,
                       ComputePlacement(Model({{"data", -1}, {"model", 2}}), Workers(3), 1));
  EXPECT_EQ(p.mesh.ToString(), "mesh[data=1,model=2]");
}

// The seed's Linear with data=-1: its kernel [32, 32] is sharded over data.
ModelFile ScaledLinear() {
  absl::StatusOr<ModelFile> m = ParseModelFile(R"({
    "name": "linear_scaled", "mesh": {"data": -1}, "dtype": "float32", "seed": 0,
    "inputs": {"x": {"shape": [-1, 32], "sharding": ["data"]}},
    "params": {"kernel": {"shape": [32, 32], "sharding": [null, "data"],
                          "init": "xavier_uniform"}},
    "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "kernel",
                "out_sharding": ["data"]}],
    "outputs": ["y"]})",
                                               "linear_scaled.json");
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

TEST(PlacementTest, MinusOneAxisSkipsWorkerCountsTheModelDoesNotShardOver) {
  // 3 does not divide the kernel's 32 columns: 2 of the 3 workers serve.
  ASSERT_OK_AND_ASSIGN(Placement p3, ComputePlacement(ScaledLinear(), Workers(3), 1));
  EXPECT_EQ(p3.mesh.ToString(), "mesh[data=2]");
  EXPECT_THAT(p3.device_workers, ElementsAre(10, 11));
  ASSERT_OK_AND_ASSIGN(Placement p4, ComputePlacement(ScaledLinear(), Workers(4), 1));
  EXPECT_EQ(p4.mesh.ToString(), "mesh[data=4]");
  ASSERT_OK_AND_ASSIGN(Placement p7, ComputePlacement(ScaledLinear(), Workers(7), 1));
  EXPECT_EQ(p7.mesh.ToString(), "mesh[data=4]");
}

TEST(PlacementTest, NoWorkersIsFailedPrecondition) {
  EXPECT_THAT(ComputePlacement(Model({{"data", 2}}), {}, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(PlacementTest, SameLayoutIgnoresGeneration) {
  ASSERT_OK_AND_ASSIGN(Placement a, ComputePlacement(Model({{"data", -1}}), Workers(2), 1));
  ASSERT_OK_AND_ASSIGN(Placement b, ComputePlacement(Model({{"data", -1}}), Workers(2), 2));
  ASSERT_OK_AND_ASSIGN(Placement c, ComputePlacement(Model({{"data", -1}}), Workers(3), 3));
  EXPECT_TRUE(a.SameLayoutAs(b));
  EXPECT_FALSE(a.SameLayoutAs(c));
}

}  // namespace
}  // namespace meshserve
