// Tests of CostFigures from a ClusterService.Status reply (target_figures.h):
// the median over reporting workers (odd and even counts, computed here by
// hand), workers without figures skipped, the unmeasured figures kept from
// the defaults, and the errors.
#include "server/suggest/target_figures.h"

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

TEST(TargetFiguresTest, NoFiguresOrABadOneIsAnError) {
  ClusterStatusResponse s;
  AddWorker(&s, 0, 0, 0, 0, 0);
  EXPECT_THAT(FiguresFromClusterStatus(s, CostFigures{}),
              StatusIs(absl::StatusCode::kUnavailable, "none of the 1 workers"));
  AddWorker(&s, 7, 10, -1, 100, 8e9);
  EXPECT_THAT(FiguresFromClusterStatus(s, CostFigures{}),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker 7 reports gemm_gflops_small_m"));
}

}  // namespace
}  // namespace meshserve
