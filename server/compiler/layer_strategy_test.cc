// Strategy choices: the compute layout each layer gets and what it costs.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compiler/compiler.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "server/compiler/layer_strategy.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;
using namespace ::meshserve::compiler_testing;  // NOLINT

const LayerPlanInfo* FindLayer(const CompiledPlan& cm, const std::string& name) {
  for (const LayerPlanInfo& l : cm.layers) {
    if (l.layer == name) return &l;
  }
  return nullptr;
}

absl::StatusOr<CompiledPlan> CompileSwiglu(int d, int f, std::vector<int64_t> x_shape,
                                            int num_workers, TypedModel* typed = nullptr) {
  auto m = ParseModelFile(Swiglu(d, f), "");
  if (!m.ok()) return m.status();
  auto mesh = ResolveMesh(*m, 8);
  if (!mesh.ok()) return mesh.status();
  auto tm = TypeModel(*m, *mesh, {{"x", x_shape}});
  if (!tm.ok()) return tm.status();
  if (typed != nullptr) *typed = *tm;
  return CompileModel(*tm, BlockWorkers(8, num_workers), {"p", 0});
}

// x:[B@fsdp,T,D] . W:[D@fsdp,F@model] -> [B@fsdp,T,F@model]: moving the
// activations (all-to-all of x, reduce-scatter of the partial sums) beats
// all-gathering W when W is larger than the activations, as in serving.
TEST(StrategyTest, SwigluGateProjectionIsWeightStationary) {
  TypedModel tm;
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileSwiglu(256, 256, {2, 4, 256}, 8, &tm));
  const LayerPlanInfo* gate = FindLayer(cm, "gate");
  ASSERT_NE(gate, nullptr);
  EXPECT_THAT(gate->strategy, HasSubstr("fsdp->y(contract)"));
  EXPECT_THAT(gate->strategy, HasSubstr("model->z"));
  for (const CollectiveInfo& c : gate->collectives) {
    EXPECT_NE(c.value, "gate_proj.kernel") << "weights moved: " << cm.ToString();
  }
  // Activations only: x [2,4,256] f32 is resharded from P('fsdp') to
  // P(None, None, 'fsdp') (each of 8 workers lacks 1x4x128 of its 2x4x128
  // box), and the partial sums [2,4,256@model]{U:fsdp} are reduce-scattered to
  // P('fsdp', None, 'model') (each worker receives its 1x4x64 box once).
  const int64_t x_bytes = 8 * (1 * 4 * 128) * 4;
  const int64_t rs_bytes = 8 * (1 * 4 * 64) * 4;
  EXPECT_EQ(gate->bytes_moved, x_bytes + rs_bytes) << cm.ToString();
  const int64_t weight_bytes = tm.TypeOf("gate_proj.kernel").NumBytes();
  EXPECT_LT(gate->bytes_moved, weight_bytes);
  ASSERT_EQ(gate->collectives.size(), 2u);
  EXPECT_EQ(gate->collectives[0].value, "x");
  EXPECT_EQ(gate->collectives[1].pattern, "reduce-scatter");
}

// Same layer, but activations far larger than the weights: all-gathering the
// weights is now cheaper, and the compiler says so.
TEST(StrategyTest, LargeActivationsGatherTheWeightsInstead) {
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileSwiglu(8, 8, {64, 32, 8}, 8));
  const LayerPlanInfo* gate = FindLayer(cm, "gate");
  ASSERT_NE(gate, nullptr);
  bool moved_weights = false;
  for (const CollectiveInfo& c : gate->collectives) {
    moved_weights |= c.value == "gate_proj.kernel" && c.bytes > 0;
    EXPECT_NE(c.value, "x") << cm.ToString();
  }
  EXPECT_TRUE(moved_weights) << cm.ToString();
}

// On one worker every layout change is free; the tie-break is GEMM work, so
// every mesh axis shards the gate projection (8-way split of the flops).
TEST(StrategyTest, OneWorkerBalancesGemmWork) {
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileSwiglu(64, 64, {2, 4, 64}, 1));
  const LayerPlanInfo* gate = FindLayer(cm, "gate");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->bytes_moved, 0);
  EXPECT_EQ(gate->max_device_flops, 2 * 2 * 4 * 64 * 64 / 8);
  EXPECT_EQ(cm.bytes_moved, 0);
}

// The seed's down projection with out_sharding P('fsdp', None, 'model'):
// h [B@fsdp,T,F@model] . W [F@model, D@fsdp]: contracting over model
// (partial sums), then a reduce-scatter into the typed result.
TEST(StrategyTest, DownProjectionReducesPartialSums) {
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileSwiglu(256, 256, {2, 4, 256}, 8));
  const LayerPlanInfo* y = FindLayer(cm, "y");
  ASSERT_NE(y, nullptr);
  EXPECT_THAT(y->strategy, HasSubstr("model->y(contract)"));
  bool reduced = false;
  for (const CollectiveInfo& c : y->collectives) {
    EXPECT_NE(c.value, "down_proj.kernel") << cm.ToString();
    reduced |= c.purpose == "result" && c.pattern == "reduce-scatter";
  }
  EXPECT_TRUE(reduced) << cm.ToString();
}

TEST(StrategyTest, DescriptionNamesLayersPatternsAndBytes) {
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileSwiglu(256, 256, {2, 4, 256}, 8));
  std::string text = cm.ToString();
  EXPECT_THAT(text, HasSubstr("gate = linear -> float32[2@fsdp,4,256@model]"));
  EXPECT_THAT(text, HasSubstr("reduce-scatter"));
  EXPECT_THAT(text, HasSubstr("bytes moved per request: "));
}

TEST(StrategyTest, ParseEinsumLabels) {
  ASSERT_OK_AND_ASSIGN(DotSpecLabels l, ParseEinsumLabels("bqhd, bkhd -> bhqk"));
  EXPECT_EQ(l.lhs, "bqhd");
  EXPECT_EQ(l.rhs, "bkhd");
  EXPECT_EQ(l.out, "bhqk");
  EXPECT_THAT(ParseEinsumLabels("ab,bc"), StatusIs(absl::StatusCode::kInvalidArgument, "'->'"));
  EXPECT_THAT(ParseEinsumLabels("ab->a"),
              StatusIs(absl::StatusCode::kInvalidArgument, "two operands"));
  EXPECT_THAT(ParseEinsumLabels("abx,bc->ac"),
              StatusIs(absl::StatusCode::kUnimplemented, "label 'x' is summed away"));
  EXPECT_THAT(ParseEinsumLabels("ab,bc->acz"),
              StatusIs(absl::StatusCode::kInvalidArgument, "output label 'z'"));
}

}  // namespace
}  // namespace meshserve
