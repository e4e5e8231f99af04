#include "common/sharding/reshard_plan.h"

#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/sharding/shard_layout.h"
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

// ---- All-reduce: direct and two-phase (reduce-scatter + all-gather) ----

// Calls fn(linear index in `shape`) for every element of `box`.
void ForEachElement(const std::vector<int64_t>& shape, const Box& box,
                    const std::function<void(int64_t)>& fn) {
  if (box.IsEmpty()) return;
  std::vector<int64_t> at(box.rank());
  for (int i = 0; i < box.rank(); ++i) at[i] = box[i].begin;
  while (true) {
    int64_t linear = 0;
    for (int i = 0; i < box.rank(); ++i) linear = linear * shape[i] + at[i];
    fn(linear);
    int i = box.rank() - 1;
    for (; i >= 0; --i) {
      if (++at[i] < box[i].end) break;
      at[i] = box[i].begin;
    }
    if (i < 0) return;
  }
}

// Runs the plan on whole-array buffers: source device d holds the partial
// value 1000 * (partial_of(d) + 1) + e at element e of its box; checks that
// every destination device ends with the sum over all partials on its box,
// that a reduce only adds into written elements and a forward only reads
// finished ones.
void ExpectPlanSumsPartials(const ReshardPlan& plan, const std::vector<int64_t>& shape,
                            const ReshardEndpoint& src, const ReshardEndpoint& dst,
                            int64_t num_partials,
                            const std::function<int64_t(int64_t)>& partial_of) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  const int64_t n = dst.sharding.mesh().num_devices();
  std::vector<std::vector<int64_t>> value(n, std::vector<int64_t>(total, 0));
  std::vector<std::vector<bool>> written(n, std::vector<bool>(total, false));
  auto src_value = [&](int64_t device, int64_t e) {
    return 1000 * (partial_of(device) + 1) + e;
  };
  for (const Transfer& t : plan.Transfers()) {
    SCOPED_TRACE(t.ToString());
    ASSERT_EQ(IsNetworkTransfer(t.kind), t.src_worker != t.dst_worker);
    const bool forward =
        t.kind == TransferKind::kForward || t.kind == TransferKind::kLocalForward;
    ForEachElement(shape, t.box, [&](int64_t e) {
      int64_t v = 0;
      if (forward) {
        EXPECT_TRUE(written[t.src_device][e]) << "forwarded an unfinished element " << e;
        v = value[t.src_device][e];
      } else {
        v = src_value(t.src_device, e);
        for (int64_t a : t.src_addends) v += src_value(a, e);
      }
      if (t.kind == TransferKind::kReduce) {
        EXPECT_TRUE(written[t.dst_device][e]) << "reduce into unwritten element " << e;
        value[t.dst_device][e] += v;
      } else {
        value[t.dst_device][e] = v;
      }
      written[t.dst_device][e] = true;
    });
  }
  for (int64_t d = 0; d < n; ++d) {
    ForEachElement(shape, ShardBoxForDevice(shape, dst.sharding, d), [&](int64_t e) {
      int64_t want = 0;
      for (int64_t g = 0; g < num_partials; ++g) want += 1000 * (g + 1) + e;
      ASSERT_TRUE(written[d][e]) << "device " << d << " element " << e;
      ASSERT_EQ(value[d][e], want) << "device " << d << " element " << e;
    });
  }
  (void)src;
}

ReshardOptions Form(AllReduceForm form) {
  ReshardOptions options;
  options.all_reduce = form;
  return options;
}

// Plans the all-reduce src_spec -> dst_spec on `mesh_text` (rank of shape)
// in `form` and checks by simulation that every device ends with the sum of
// the partials (partial_of: a source device's partial index).
ReshardPlan PlanAllReduce(absl::string_view mesh_text, absl::string_view src_spec,
                          absl::string_view dst_spec, const std::vector<int64_t>& shape,
                          DType dtype, AllReduceForm form, int64_t num_partials,
                          const std::function<int64_t(int64_t)>& partial_of,
                          std::vector<int64_t> workers = {}) {
  const int rank = static_cast<int>(shape.size());
  ReshardEndpoint src = Endpoint(mesh_text, src_spec, rank, workers);
  ReshardEndpoint dst = Endpoint(mesh_text, dst_spec, rank, workers);
  absl::StatusOr<ReshardPlan> plan = ComputeReshardPlan(shape, dtype, src, dst, Form(form));
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  EXPECT_EQ(plan->bytes_moved, plan->lower_bound_bytes);
  ExpectPlanSumsPartials(*plan, shape, src, dst, num_partials, partial_of);
  return *std::move(plan);
}

int64_t Identity(int64_t d) { return d; }

TEST(ReshardPlanTest, TwoPhaseAllReduceMovesTwoKMinusOneTimesTheBox) {
  const ReshardPlan plan = PlanAllReduce("mesh[x=4]", "P(None, unreduced={'x'})", "P()", {8},
                                         DType::kFloat32, AllReduceForm::kTwoPhase, 4, Identity);
  EXPECT_EQ(plan.pattern, "all-reduce (reduce-scatter + all-gather)");
  EXPECT_EQ(plan.strategy, "PlanTwoPhaseAllReduce");
  EXPECT_EQ(plan.num_rounds, 2);
  // 2 * (4 - 1) messages per element, 8 float32 elements.
  EXPECT_EQ(plan.bytes_moved, 2 * 3 * 8 * 4);
  // Each worker sends (and receives) 2 (k-1)/k of the box: 12 of 8 elements.
  EXPECT_EQ(plan.max_worker_bytes, 12 * 4);
  EXPECT_EQ(CountKind(plan, TransferKind::kReduce), 4 * 3);
  EXPECT_EQ(CountKind(plan, TransferKind::kForward), 4 * 3);

  const ReshardPlan direct = PlanAllReduce("mesh[x=4]", "P(None, unreduced={'x'})", "P()", {8},
                                           DType::kFloat32, AllReduceForm::kDirect, 4, Identity);
  EXPECT_EQ(direct.pattern, "all-reduce");
  EXPECT_EQ(direct.num_rounds, 1);
  EXPECT_EQ(direct.bytes_moved, 4 * 3 * 8 * 4);
  EXPECT_EQ(direct.max_worker_bytes, 3 * 8 * 4);
}

TEST(ReshardPlanTest, TwoPhaseAllReducePerShardWithWorkersHoldingTwoDevices) {
  // mesh [data=2, model=4] on 4 workers (2 devices each, along model): per
  // data shard, the 4 model partials live on 2 workers, pre-added.
  const ReshardPlan plan = PlanAllReduce(
      "mesh[data=2,model=4]", "P('data', None, unreduced={'model'})", "P('data', None)", {4, 6},
      DType::kFloat32, AllReduceForm::kTwoPhase, 4, [](int64_t d) { return d % 4; },
      {0, 0, 1, 1, 2, 2, 3, 3});
  EXPECT_EQ(plan.pattern, "all-reduce (reduce-scatter + all-gather)");
  // Two units (data shards) of 2x6 elements, k = 2 workers each.
  EXPECT_EQ(plan.bytes_moved, 2 * (2 * 1 * 12) * 4);
  for (const Transfer& t : plan.Transfers()) {
    if (t.kind == TransferKind::kReduce) {
      EXPECT_EQ(t.src_addends.size(), 1u) << t;
    }
  }
}

TEST(ReshardPlanTest, TwoPhaseAllReduceOnSixWorkersWithAShortBox) {
  // A 4-element box on 6 workers: 4 chunks, owners are the first 4 workers.
  const ReshardPlan plan = PlanAllReduce("mesh[x=6]", "P(None, unreduced={'x'})", "P()", {4},
                                         DType::kBFloat16, AllReduceForm::kTwoPhase, 6, Identity);
  EXPECT_EQ(plan.pattern, "all-reduce (reduce-scatter + all-gather)");
  EXPECT_EQ(plan.bytes_moved, 2 * 5 * 4 * 2);
}

TEST(ReshardPlanTest, TwoPhaseDoesNotApplyWhenAPartialIsOnTwoWorkers) {
  // Replicated along data: partial g lives on two workers -> direct form.
  const ReshardPlan plan =
      PlanAllReduce("mesh[data=2,model=2]", "P(None, unreduced={'model'})", "P()", {8},
                    DType::kFloat32, AllReduceForm::kTwoPhase, 2, [](int64_t d) { return d % 2; });
  EXPECT_EQ(plan.pattern, "all-reduce");
}

TEST(ReshardPlanTest, AutoChoosesTheFormByTheCostModel) {
  ReshardEndpoint src = Endpoint("mesh[x=4]", "P(None, unreduced={'x'})", 2);
  ReshardEndpoint dst = Endpoint("mesh[x=4]", "P()", 2);
  const CollectiveCostModel cost;
  // One token of GPT-2 small (768 float32): direct = 3 * 3 KiB / 1.7 GB/s +
  // 0.2 ms = 0.21 ms, two-phase = 1.5 * 3 KiB / 1.7 GB/s + 0.4 ms: direct.
  ASSERT_OK_AND_ASSIGN(ReshardPlan one, ComputeReshardPlan({1, 768}, DType::kFloat32, src, dst));
  EXPECT_EQ(one.pattern, "all-reduce");
  // 128 tokens (384 KiB): direct 0.89 ms, two-phase 0.75 ms: two-phase.
  ASSERT_OK_AND_ASSIGN(ReshardPlan many,
                       ComputeReshardPlan({128, 768}, DType::kFloat32, src, dst));
  EXPECT_EQ(many.pattern, "all-reduce (reduce-scatter + all-gather)");
  ASSERT_OK_AND_ASSIGN(ReshardPlan many_direct,
                       ComputeReshardPlan({128, 768}, DType::kFloat32, src, dst,
                                          Form(AllReduceForm::kDirect)));
  EXPECT_LT(cost.Seconds(many.max_worker_bytes, many.num_rounds),
            cost.Seconds(many_direct.max_worker_bytes, many_direct.num_rounds));
  EXPECT_LT(many.bytes_moved, many_direct.bytes_moved);
  // A free hop makes two-phase win at one token too; a slow one keeps direct.
  ReshardOptions free_hop;
  free_hop.cost.hop_s = 0;
  ASSERT_OK_AND_ASSIGN(ReshardPlan one_free,
                       ComputeReshardPlan({1, 768}, DType::kFloat32, src, dst, free_hop));
  EXPECT_EQ(one_free.pattern, "all-reduce (reduce-scatter + all-gather)");
  ReshardOptions slow_hop;
  slow_hop.cost.hop_s = 1.0;
  ASSERT_OK_AND_ASSIGN(ReshardPlan many_slow,
                       ComputeReshardPlan({128, 768}, DType::kFloat32, src, dst, slow_hop));
  EXPECT_EQ(many_slow.pattern, "all-reduce");
}

// GPT-2 small's two all-reduces per block (attention out, MLP out) over 12
// blocks, hidden 768, float32, on W = 2, 4, 6 workers: bytes moved by the
// direct form, the two-phase form and the form the default cost model picks.
TEST(ReshardPlanTest, Gpt2SmallAllReduceBytesByForm) {
  for (int64_t tokens : {1, 128}) {
    for (int64_t w : {2, 4, 6}) {
      const std::string mesh = "mesh[x=" + std::to_string(w) + "]";
      ReshardEndpoint src = Endpoint(mesh, "P(None, unreduced={'x'})", 2);
      ReshardEndpoint dst = Endpoint(mesh, "P()", 2);
      const std::vector<int64_t> shape = {tokens, 768};
      ASSERT_OK_AND_ASSIGN(ReshardPlan direct,
                           ComputeReshardPlan(shape, DType::kFloat32, src, dst,
                                              Form(AllReduceForm::kDirect)));
      ASSERT_OK_AND_ASSIGN(ReshardPlan two,
                           ComputeReshardPlan(shape, DType::kFloat32, src, dst,
                                              Form(AllReduceForm::kTwoPhase)));
      ASSERT_OK_AND_ASSIGN(ReshardPlan chosen,
                           ComputeReshardPlan(shape, DType::kFloat32, src, dst));
      const int64_t n = tokens * 768 * 4;
      EXPECT_EQ(direct.bytes_moved, w * (w - 1) * n);
      EXPECT_EQ(two.bytes_moved, 2 * (w - 1) * n);
      EXPECT_EQ(two.max_worker_bytes, 2 * (w - 1) * n / w);
      // k = 2: both forms move 2 |B|; the second round only costs a hop.
      if (w == 2) {
        EXPECT_EQ(chosen.pattern, "all-reduce");
      }
      std::printf("gpt2-small %3lld tokens, %lld workers, 24 all-reduces: direct %lld B, "
                  "two-phase %lld B, chosen %s: %lld B\n",
                  static_cast<long long>(tokens), static_cast<long long>(w),
                  static_cast<long long>(24 * direct.bytes_moved),
                  static_cast<long long>(24 * two.bytes_moved), chosen.pattern.c_str(),
                  static_cast<long long>(24 * chosen.bytes_moved));
    }
  }
}

}  // namespace
}  // namespace meshserve
