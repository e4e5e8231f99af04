// Tests of CostFigures from a ClusterService.Status reply (target_figures.h):
// the median over reporting workers (odd and even counts, computed here by
// hand), workers without figures skipped, the unmeasured figures kept from
// the defaults, and the errors.
#include "server/suggest/target_figures.h"

#include "server/suggest/cost_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

void AddWorker(ClusterStatusResponse* s, int64_t id, double one_row, double small_m,
               double large_m, double memory) {
  auto* w = s->add_workers();
  w->set_worker_id(id);
  w->set_gemm_gflops_one_row(one_row);
  w->set_gemm_gflops_small_m(small_m);
  w->set_gemm_gflops_large_m(large_m);
  w->set_memory_bytes_per_s(memory);
}

TEST(TargetFiguresTest, MedianOverReportingWorkers) {
  ClusterStatusResponse s;
  AddWorker(&s, 0, 10, 40, 100, 8e9);
  AddWorker(&s, 1, 30, 20, 300, 12e9);
  AddWorker(&s, 2, 20, 60, 200, 10e9);
  AddWorker(&s, 3, 0, 0, 0, 0);  // not measured yet: skipped
  EXPECT_EQ(WorkersWithFigures(s), 3);
  CostFigures defaults;
  defaults.hop_ms = 0.7;
  ASSERT_OK_AND_ASSIGN(CostFigures f, FiguresFromClusterStatus(s, defaults));
  EXPECT_EQ(f.source, "target");
  EXPECT_EQ(f.gemm_gflops_one_row, 20);
  EXPECT_EQ(f.gemm_gflops_small_m, 40);
  EXPECT_EQ(f.gemm_gflops_large_m, 200);
  EXPECT_EQ(f.memory_bytes_per_s, 10e9);
  EXPECT_EQ(f.hop_ms, 0.7);  // not measured: the defaults'
  EXPECT_EQ(f.link_bytes_per_s, defaults.link_bytes_per_s);

  AddWorker(&s, 4, 50, 80, 400, 20e9);  // four: the mean of the middle two
  ASSERT_OK_AND_ASSIGN(f, FiguresFromClusterStatus(s, defaults));
  EXPECT_EQ(f.gemm_gflops_one_row, 25);
  EXPECT_EQ(f.gemm_gflops_small_m, 50);
  EXPECT_EQ(f.gemm_gflops_large_m, 250);
  EXPECT_EQ(f.memory_bytes_per_s, 11e9);
}

// The link bandwidth is the median over workers reporting one (the hop stays
// the defaults'); host sharing
// counts healthy workers per address host and takes the fewest cores.
TEST(TargetFiguresTest, LinkAndHostSharing) {
  ClusterStatusResponse s;
  AddWorker(&s, 0, 10, 40, 100, 8e9);
  AddWorker(&s, 1, 10, 40, 100, 8e9);
  AddWorker(&s, 2, 10, 40, 100, 8e9);
  AddWorker(&s, 3, 10, 40, 100, 8e9);
  const char* addresses[] = {"10.0.0.1:5001", "10.0.0.1:5002", "10.0.0.1:5003", "10.0.0.2:5001"};
  const int cores[] = {8, 8, 8, 4};
  const double hops[] = {0.02, 0.04, 0, 0.03};
  const double links[] = {3e9, 5e9, 0, 4e9};  // worker 2 reports no link
  for (int i = 0; i < 4; ++i) {
    auto* w = s.mutable_workers(i);
    w->set_address(addresses[i]);
    w->set_healthy(true);
    w->set_cores(cores[i]);
    w->set_blas_threads(2);
    w->set_hop_ms(hops[i]);
    w->set_link_bytes_per_s(links[i]);
  }
  CostFigures defaults;
  ASSERT_OK_AND_ASSIGN(CostFigures f, FiguresFromClusterStatus(s, defaults));
  EXPECT_EQ(f.hop_ms, defaults.hop_ms);  // loopback TCP's floor is not a gRPC hop
  EXPECT_EQ(f.link_bytes_per_s, 4e9);
  EXPECT_EQ(f.workers_per_host, 3);
  EXPECT_EQ(f.host_cores, 4);
  EXPECT_EQ(f.threads_per_worker, 2);
  // 3 workers x 2 threads on 4 cores: 1.5x; 1 worker: no slowdown.
  EXPECT_DOUBLE_EQ(HostSlowdown(f, 4), 1.5);
  EXPECT_DOUBLE_EQ(HostSlowdown(f, 1), 1.0);
  EXPECT_DOUBLE_EQ(HostSlowdown(CostFigures{}, 8), 1.0);  // cores unknown
}

TEST(TargetFiguresTest, NoFiguresOrABadOneIsAnError) {
  ClusterStatusResponse s;
  AddWorker(&s, 0, 0, 0, 0, 0);
  EXPECT_THAT(FiguresFromClusterStatus(s, CostFigures{}),
              StatusIs(absl::StatusCode::kUnavailable, "none of the 1 workers"));
  AddWorker(&s, 7, 10, -1, 100, 8e9);
  EXPECT_THAT(FiguresFromClusterStatus(s, CostFigures{}),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker 7 reports gemm_gflops_small_m"));
}

// A layer's predicted ms by hand: a one-row dot of 2 GFLOP at 20 GFLOP/s is
// 100 ms, twice that with 2 workers on 1 core; 1.7 MB over 2 workers at
// 1.7 GB/s is 0.5 ms; one round 0.2 ms. An elementwise layer with no typed
// result and the outputs' gather (no op) compute nothing.
TEST(TargetFiguresTest, LayerPredictedMsByHand) {
  CostFigures f;
  f.gemm_gflops_one_row = 20;
  f.link_bytes_per_s = 1.7e9;
  f.hop_ms = 0.2;
  f.host_cores = 1;
  LayerPlanInfo dot;
  dot.op = ModelOp::kLinear;
  dot.max_device_flops = 2000000000;
  dot.bytes_moved = 1700000;
  dot.collectives.emplace_back();
  dot.collectives.back().rounds = 1;
  EXPECT_NEAR(LayerComputeMs(dot, nullptr, f), 100.0, 1e-9);
  EXPECT_NEAR(LayerPredictedMs(dot, nullptr, f, 2), 200.0 + 0.5 + 0.2, 1e-9);
  EXPECT_NEAR(LayerPredictedMs(dot, nullptr, f, 1), 100.0 + 1.0 + 0.2, 1e-9);
  LayerPlanInfo silu;
  silu.op = ModelOp::kSilu;
  EXPECT_EQ(LayerComputeMs(silu, nullptr, f), 0);
  LayerPlanInfo gather;
  gather.max_device_flops = 5;
  EXPECT_EQ(LayerComputeMs(gather, nullptr, f), 0);
}

}  // namespace
}  // namespace meshserve
