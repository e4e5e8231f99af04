// InProcessWorkers over the program IR (as the compiler's tests use it): a
// 2-worker matmul with a reduce-scatter, slices chunked in memory, and a
// failure on one worker cancelling the request on the other.
#include "server/worker/testing/in_process_workers.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::program_testing::Compute;
using ::meshserve::program_testing::IrBox;
using ::meshserve::program_testing::Output;
using ::meshserve::program_testing::ProgramOf;
using ::meshserve::program_testing::Recv;
using ::meshserve::program_testing::Send;
using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;

constexpr int64_t kM = 4, kK = 8, kN = 6;

// w is all ones: y[m, n] = sum_k x[m, k].
std::string ModelJson() {
  return absl::StrReplaceAll(
      R"({'name': 'mm', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 1,
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, 'x']}},
  'params': {'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'ones'}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': ['x', null]}],
  'outputs': ['y']})",
      {{"'", "\""}});
}

ProgramIr MatmulProgram(int64_t worker, bool send) {
  const int64_t other = 1 - worker, half = kM / 2;
  ComputeStepIr dot = Compute(worker, ComputeOp::kDotGeneral, {"in/x", "param/w"}, "partial",
                              IrBox({{0, kM}, {0, kN}}));
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {0};
  dot.partial = true;
  std::vector<StepIr> steps = {dot};
  if (send) {
    steps.push_back(Send(worker, "partial", IrBox({{other * half, (other + 1) * half}, {0, kN}}),
                         other, other, absl::StrCat(worker, "->", other)));
  }
  const BoxIr mine = IrBox({{worker * half, (worker + 1) * half}, {0, kN}});
  steps.push_back(Recv(worker, "partial", mine, absl::StrCat(other, "->", worker),
                       /*accumulate=*/true, BoxIr(), std::nullopt, other));
  steps.push_back(Output(worker, "partial", mine, "y"));
  return ProgramOf("mm", "mm", 3, worker, std::move(steps));
}

LoadModelIr Load() {
  LoadModelIr load;
  load.model = "mm";
  load.generation = 3;
  load.model_json = ModelJson();
  load.mesh = {MeshAxisIr{"x", 2, ""}};
  load.device_workers = {0, 1};
  return load;
}

// Worker w's slice of x [kM, kK]: its half of the columns, on device w.
std::map<int64_t, std::vector<SliceIr>> Inputs(const std::vector<float>& x) {
  std::map<int64_t, std::vector<SliceIr>> inputs;
  for (int w = 0; w < 2; ++w) {
    SliceIr in;
    in.name = "x";
    in.device = w;
    in.box = IrBox({{0, kM}, {w * kK / 2, (w + 1) * kK / 2}});
    in.dtype = DType::kFloat32;
    std::vector<float> part;
    for (int64_t m = 0; m < kM; ++m) {
      for (int64_t k = w * kK / 2; k < (w + 1) * kK / 2; ++k) part.push_back(x[m * kK + k]);
    }
    in.data.assign(reinterpret_cast<const char*>(part.data()), part.size() * 4);
    inputs[w].push_back(std::move(in));
  }
  return inputs;
}

TEST(InProcessWorkersTest, RunsAProgramAcrossWorkersWithChunkedSlices) {
  InProcessWorkers::Options options;
  options.chunk_bytes = 7;
  InProcessWorkers cluster(2, options);
  ASSERT_OK_AND_ASSIGN(int64_t bytes, cluster.LoadModel(Load()));
  EXPECT_EQ(bytes, kK * kN * 4);
  ASSERT_OK(cluster.InstallPrograms({MatmulProgram(0, true), MatmulProgram(1, true)}));
  std::vector<float> x(kM * kK);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i % 7) - 1.f;
  ASSERT_OK_AND_ASSIGN(auto outputs,
                       cluster.Execute("mm", "r", Inputs(x), absl::Milliseconds(500)));
  ASSERT_EQ(outputs.size(), 2u);
  for (const auto& [w, slices] : outputs) {
    ASSERT_EQ(slices.size(), 1u);
    const SliceIr& y = slices[0];
    std::vector<float> rows(y.data.size() / 4);
    std::memcpy(rows.data(), y.data.data(), y.data.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t m = y.box.begin[0] + static_cast<int64_t>(i) / kN;
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) want += x[m * kK + k];
      EXPECT_NEAR(rows[i], want, 1e-5) << "worker " << w << " element " << i;
    }
  }
  EXPECT_EQ(cluster.transport().slices_sent(), 2);
}

TEST(InProcessWorkersTest, AFailureOnOneWorkerIsReportedAndTheOtherIsCancelled) {
  InProcessWorkers cluster(2);
  ASSERT_OK(cluster.LoadModel(Load()).status());
  // Worker 1 never sends: worker 0's receive waits; worker 1 gets a bad input.
  ASSERT_OK(cluster.InstallPrograms({MatmulProgram(0, true), MatmulProgram(1, false)}));
  std::map<int64_t, std::vector<SliceIr>> inputs = Inputs(std::vector<float>(kM * kK, 1.f));
  inputs[1][0].data.pop_back();
  absl::Time start = absl::Now();
  EXPECT_THAT(cluster.Execute("mm", "bad", std::move(inputs), absl::Seconds(30)),
              StatusIs(absl::StatusCode::kInvalidArgument, "byte length"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // cancelled, not timed out
}

TEST(InProcessWorkersTest, BadWorkerIdsAreInvalidArgument) {
  InProcessWorkers cluster(2);
  LoadModelIr load = Load();
  load.device_workers[1] = 5;
  EXPECT_THAT(cluster.LoadModel(load), StatusIs(absl::StatusCode::kInvalidArgument, "worker 5"));
  ProgramIr p = MatmulProgram(0, true);
  p.worker = 2;
  EXPECT_THAT(cluster.InstallPrograms({p}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cluster.Execute("mm", "r", {{7, {}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker 7"));
}

}  // namespace
}  // namespace meshserve
