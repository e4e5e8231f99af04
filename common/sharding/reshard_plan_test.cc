#include "common/sharding/reshard_plan.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

ReshardEndpoint Endpoint(absl::string_view mesh_text, absl::string_view spec_text,
                         int rank, std::vector<int64_t> workers = {}) {
  absl::StatusOr<Mesh> mesh = ParseMesh(mesh_text);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec(spec_text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<NamedSharding> sharding = NamedSharding::Create(*mesh, *spec, rank);
  EXPECT_TRUE(sharding.ok()) << sharding.status();
  ReshardEndpoint ep{*sharding, std::move(workers)};
  if (ep.device_workers.empty()) ep.device_workers = OneWorkerPerDevice(*mesh);
  return ep;
}

int64_t CountKind(const ReshardPlan& plan, TransferKind kind) {
  int64_t n = 0;
  for (const Transfer& t : plan.Transfers()) n += t.kind == kind ? 1 : 0;
  return n;
}

TEST(ReshardPlanTest, IdenticalLayoutsAreNoOp) {
  ReshardEndpoint ep = Endpoint("mesh[x=2,y=2]", "P('x', 'y')", 2);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({4, 4}, DType::kFloat32, ep, ep));
  EXPECT_EQ(plan.pattern, "no-op");
  EXPECT_EQ(plan.strategy, "PlanNoOp");
  EXPECT_EQ(plan.bytes_moved, 0);
  EXPECT_EQ(plan.lower_bound_bytes, 0);
  ASSERT_EQ(plan.NumTransfers(), 4);
  for (const Transfer& t : plan.Transfers()) {
    EXPECT_EQ(t.kind, TransferKind::kLocalCopy);
    EXPECT_EQ(t.src_device, t.dst_device);
    EXPECT_EQ(t.box.NumElements(), 4);
  }
}

TEST(ReshardPlanTest, ReplicatedToShardedIsLocalSlice) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P()", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P('x')", 1);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "local slice");
  EXPECT_EQ(plan.strategy, "PlanSliceLocal");
  EXPECT_EQ(plan.bytes_moved, 0);
  ASSERT_EQ(plan.NumTransfers(), 4);
  EXPECT_EQ(plan.Transfers()[3].box.ToString(), Box({{6, 8}}).ToString());
}

TEST(ReshardPlanTest, AllGather) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P('x', None)", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P()", 2);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8, 4}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "all-gather");
  EXPECT_EQ(plan.strategy, "PlanByBoxIntersection");
  // Each of 4 workers lacks 3 shards of 2x4 float32 elements.
  EXPECT_EQ(plan.bytes_moved, 4 * 3 * 8 * 4);
  EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_moved);
  EXPECT_EQ(plan.NumNetworkTransfers(), 12);
  EXPECT_EQ(CountKind(plan, TransferKind::kLocalCopy), 4);
}

TEST(ReshardPlanTest, AllToAll) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P('x', None)", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P(None, 'x')", 2);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8, 8}, DType::kBFloat16, src, dst));
  EXPECT_EQ(plan.pattern, "all-to-all");
  // Each device keeps its 2x2 diagonal block and receives 3 blocks of 2x2.
  EXPECT_EQ(plan.bytes_moved, 4 * 3 * 4 * 2);
  EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_moved);
}

TEST(ReshardPlanTest, ReduceScatterFromUnreduced) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P(None, unreduced={'x'})", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P('x')", 1);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "reduce-scatter");
  // Each worker needs 2 elements and lacks 3 of the 4 partial sums.
  EXPECT_EQ(plan.lower_bound_bytes, 4 * 2 * 3 * 4);
  EXPECT_EQ(plan.bytes_moved, plan.lower_bound_bytes);
  EXPECT_EQ(CountKind(plan, TransferKind::kReduce), 4 * 3);
  EXPECT_EQ(CountKind(plan, TransferKind::kLocalCopy), 4);
}

TEST(ReshardPlanTest, AllReduceFromUnreduced) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P(None, unreduced={'x'})", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P()", 1);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "all-reduce");
  EXPECT_EQ(plan.lower_bound_bytes, 4 * 8 * 3 * 4);
  EXPECT_EQ(plan.bytes_moved, plan.lower_bound_bytes);
}

TEST(ReshardPlanTest, SenderPreAddsThePartialsItHolds) {
  // Partials over x (4 of them); workers hold two devices each.
  ReshardEndpoint src =
      Endpoint("mesh[x=4]", "P(None, unreduced={'x'})", 1, {0, 0, 1, 1});
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P()", 1, {0, 0, 1, 1});
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  // Each worker receives one pre-added message of 8 elements.
  EXPECT_EQ(plan.bytes_moved, 2 * 8 * 4);
  EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_moved);
  for (const Transfer& t : plan.Transfers()) {
    if (t.kind == TransferKind::kReduce) {
      EXPECT_EQ(t.src_addends.size(), 1u);
    }
  }
}

TEST(ReshardPlanTest, CrossMeshFourToEight) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P('x')", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=8]", "P('x')", 1);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({16}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "general point-to-point");
  // Worker 0 keeps [0,2); workers 1..7 each lack their 2 elements.
  EXPECT_EQ(plan.bytes_moved, 7 * 2 * 4);
  EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_moved);
}

TEST(ReshardPlanTest, CrossMeshEightToFour) {
  ReshardEndpoint src = Endpoint("mesh[x=8]", "P('x')", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P('x')", 1);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({16}, DType::kFloat32, src, dst));
  // Worker j needs [4j, 4j+4) and holds [2j, 2j+2): worker 0 lacks 2
  // elements, workers 1..3 lack all 4.
  EXPECT_EQ(plan.bytes_moved, (2 + 3 * 4) * 4);
  EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_moved);
}

TEST(ReshardPlanTest, SeveralDevicesPerWorkerReceiveOnce) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P('x')", 1, {0, 0, 1, 1});
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P()", 1, {0, 0, 1, 1});
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  // Worker 0 holds [0,4) and lacks [4,8) once, though two devices need it.
  EXPECT_EQ(plan.bytes_moved, 2 * 4 * 4);
  EXPECT_EQ(plan.NumNetworkTransfers(), 4);
  EXPECT_EQ(CountKind(plan, TransferKind::kLocalForward), 4);
  for (const Transfer& t : plan.Transfers()) {
    if (!IsNetworkTransfer(t.kind)) {
      EXPECT_EQ(t.src_worker, t.dst_worker);
    }
  }
}

TEST(ReshardPlanTest, ReplicasShareTheLoad) {
  // Fully replicated on workers 0..3, moved to four new workers 10..13.
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P()", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P('x')", 1, {10, 11, 12, 13});
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({8}, DType::kFloat32, src, dst));
  std::set<int64_t> senders;
  for (const Transfer& t : plan.Transfers()) senders.insert(t.src_worker);
  EXPECT_EQ(senders.size(), 4u);
  EXPECT_EQ(plan.bytes_moved, 8 * 4);
}

TEST(ReshardPlanTest, RejectsRankMismatch) {
  ReshardEndpoint src = Endpoint("mesh[x=2]", "P('x', None)", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=2]", "P('x')", 1);
  EXPECT_THAT(ComputeReshardPlan({4, 4}, DType::kFloat32, src, dst),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank 2"));
}

TEST(ReshardPlanTest, RejectsWrongNumberOfWorkers) {
  ReshardEndpoint src = Endpoint("mesh[x=2]", "P('x')", 1, {0, 1, 2});
  ReshardEndpoint dst = Endpoint("mesh[x=2]", "P()", 1);
  EXPECT_THAT(ComputeReshardPlan({4}, DType::kFloat32, src, dst),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "source device_workers [0, 1, 2] has 3 entries"));
}

TEST(ReshardPlanTest, RejectsUnknownDestinationUnreducedAxis) {
  ReshardEndpoint src = Endpoint("mesh[x=2,y=2]", "P('x')", 1);
  ReshardEndpoint dst = Endpoint("mesh[x=2,y=2]", "P('x', unreduced={'y'})", 1);
  EXPECT_THAT(ComputeReshardPlan({4}, DType::kFloat32, src, dst),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "destination unreduced axis 'y'"));
}

TEST(ReshardPlanTest, RejectsUnknownAxis) {
  ReshardEndpoint src = Endpoint("mesh[x=2]", "P('x')", 1);
  ReshardEndpoint dst;
  dst.sharding = NamedSharding::UncheckedCreate(src.sharding.mesh(),
                                                PartitionSpec({{"z"}}));
  dst.device_workers = {0, 1};
  EXPECT_THAT(ComputeReshardPlan({4}, DType::kFloat32, src, dst),
              StatusIs(absl::StatusCode::kInvalidArgument, "'z'"));
}

TEST(ReshardPlanTest, ZeroSizeDimMovesNothing) {
  ReshardEndpoint src = Endpoint("mesh[x=2]", "P('x', None)", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=2]", "P(None, 'x')", 2);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({4, 0}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.NumTransfers(), 0);
  EXPECT_EQ(plan.bytes_moved, 0);
}

TEST(ReshardPlanTest, AddTransferGroupsConsecutiveTransfersToOneSource) {
  ReshardPlan plan;
  plan.dst_workers = {10, 11, 12, 13};
  const Box a({{0, 2}});
  const Box b({{2, 4}});
  plan.AddTransfer(TransferKind::kCopy, 0, 10, 1, a);
  plan.AddTransfer(TransferKind::kCopy, 0, 10, 2, a);
  plan.AddTransfer(TransferKind::kCopy, 0, 10, 3, a);
  plan.AddTransfer(TransferKind::kCopy, 0, 10, 3, b);        // another box
  plan.AddTransfer(TransferKind::kReduce, 0, 10, 2, b);      // another kind
  plan.AddTransfer(TransferKind::kReduce, 0, 10, 3, b, {1});  // addends differ
  plan.AddTransfer(TransferKind::kReduce, 1, 11, 0, b, {1});  // source differs
  ASSERT_EQ(plan.groups.size(), 5u);
  EXPECT_EQ(plan.groups[0].size(), 3);
  EXPECT_EQ(plan.NumTransfers(), 7);
  EXPECT_EQ(plan.NumNetworkTransfers(), 7);
  const std::vector<Transfer> transfers = plan.Transfers();
  ASSERT_EQ(transfers.size(), 7u);
  EXPECT_EQ(transfers[1], (Transfer{TransferKind::kCopy, 0, 10, 2, 12, a, {}}));
  EXPECT_EQ(transfers[3], (Transfer{TransferKind::kCopy, 0, 10, 3, 13, b, {}}));
  EXPECT_EQ(transfers[5], (Transfer{TransferKind::kReduce, 0, 10, 3, 13, b, {1}}));
  EXPECT_EQ(transfers[6], (Transfer{TransferKind::kReduce, 1, 11, 0, 10, b, {1}}));
}

TEST(ReshardPlanTest, FullAllGatherIsOneGroupPerShardAndSide) {
  // Device d's shard goes to every other device: 8 * 7 network transfers, but
  // per shard only the copies before and after the holder's local copy.
  ReshardEndpoint src = Endpoint("mesh[x=2,y=4]", "P(('x', 'y'), None)", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=2,y=4]", "P()", 2);
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan,
                       ComputeReshardPlan({16, 4}, DType::kFloat32, src, dst));
  EXPECT_EQ(plan.pattern, "all-gather");
  EXPECT_EQ(plan.NumTransfers(), 64);
  EXPECT_EQ(plan.NumNetworkTransfers(), 56);
  EXPECT_LE(plan.groups.size(), 8u * 3);
  std::set<std::pair<int64_t, int64_t>> edges;
  for (const Transfer& t : plan.Transfers()) {
    EXPECT_EQ(t.box, Box({{2 * t.src_device, 2 * t.src_device + 2}, {0, 4}}));
    EXPECT_EQ(t.kind, t.src_device == t.dst_device ? TransferKind::kLocalCopy
                                                   : TransferKind::kCopy);
    edges.insert({t.src_device, t.dst_device});
  }
  EXPECT_EQ(edges.size(), 64u);
}

}  // namespace
}  // namespace meshserve
