// RunComputeStep's new ops (compute_step.h): the global offsets of positions,
// rope and the causal mask come from the step's out_box; each op reads its own
// axis attribute (positions_axis, rope_seq_axis, softmax_axis); embed's
// vocab_size check. Expected values are naive loops (or the whole-array kernel, itself
// tested against naive loops in attention_test.cc, sliced to the box).
#include "common/program/compute_step.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/tensor/kernels.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using namespace ::meshserve::program_testing;  // NOLINT

BoxTensor Values(const Box& box, float base) {
  std::vector<float> v(box.NumElements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.37f * static_cast<float>(i % 11);
  return *BoxTensor::Wrap(box, *Tensor::FromValues(DType::kFloat32, box.shape(), v));
}

TEST(ComputeStepTest, PositionsCountFromTheOutBoxBegin) {
  ComputeStepIr step = Compute(0, ComputeOp::kPositions, {}, "pos", IrBox({{2, 4}, {5, 8}}),
                               kWireInt32);
  step.positions_axis = 1;
  step.rope_seq_axis = 0;  // another op's attribute: not read by positions
  step.softmax_axis = 0;
  ASSERT_OK_AND_ASSIGN(BoxTensor out, RunComputeStep(step, {}));
  ASSERT_EQ(out.tensor.dtype(), DType::kInt32);
  std::vector<int32_t> got(out.tensor.data<int32_t>(), out.tensor.data<int32_t>() + 6);
  EXPECT_EQ(got, (std::vector<int32_t>{5, 6, 7, 5, 6, 7}));
}

TEST(ComputeStepTest, RopeOfAShardEqualsTheSliceOfTheWhole) {
  // The whole [1, 6, 4] and its shard [0:1, 3:6, 0:4].
  BoxTensor whole = Values(Box({{0, 1}, {0, 6}, {0, 4}}), -1.0f);
  ASSERT_OK_AND_ASSIGN(Tensor want_all, Rope(whole.tensor, 1, 0, 100.0, DType::kFloat32));
  std::vector<float> all = want_all.ToFloatVector();
  std::vector<float> x(whole.tensor.ToFloatVector());
  Box shard_box({{0, 1}, {3, 6}, {0, 4}});
  BoxTensor shard = *BoxTensor::Wrap(
      shard_box, *Tensor::FromValues(DType::kFloat32, shard_box.shape(),
                                     std::vector<float>(x.begin() + 12, x.end())));
  ComputeStepIr step = Compute(0, ComputeOp::kRope, {"x"}, "r", IrBox({{0, 1}, {3, 6}, {0, 4}}));
  step.rope_seq_axis = 1;
  step.positions_axis = 2;  // another op's attribute: not read by rope
  step.theta = 100.0;
  const BoxTensor* in[] = {&shard};
  ASSERT_OK_AND_ASSIGN(BoxTensor out, RunComputeStep(step, in));
  std::vector<float> got = out.tensor.ToFloatVector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], all[12 + i]) << i;
}

TEST(ComputeStepTest, CausalSoftmaxOfQueryRowsUsesTheirGlobalIndex) {
  // Rows q = 2, 3 of a 4 x 4 score matrix: q = 2 keeps k <= 2.
  BoxTensor s = Values(Box({{2, 4}, {0, 4}}), 0.0f);
  ComputeStepIr step = Compute(0, ComputeOp::kSoftmax, {"s"}, "p", IrBox({{2, 4}, {0, 4}}));
  step.softmax_axis = 1;
  step.causal = true;
  step.scale = 0.5f;
  const BoxTensor* in[] = {&s};
  ASSERT_OK_AND_ASSIGN(BoxTensor out, RunComputeStep(step, in));
  std::vector<float> x = s.tensor.ToFloatVector(), got = out.tensor.ToFloatVector();
  for (int q = 0; q < 2; ++q) {
    double sum = 0;
    for (int k = 0; k <= q + 2; ++k) sum += std::exp(0.5 * x[q * 4 + k]);
    for (int k = 0; k < 4; ++k) {
      const double want = k <= q + 2 ? std::exp(0.5 * x[q * 4 + k]) / sum : 0.0;
      EXPECT_NEAR(got[q * 4 + k], want, 1e-6) << q << "," << k;
    }
  }
}

TEST(ComputeStepTest, SoftmaxNormalisesSoftmaxAxisAndDefaultsToTheLast) {
  BoxTensor s = Values(Box({{0, 2}, {0, 3}}), 0.0f);
  const std::vector<float> x = s.tensor.ToFloatVector();
  const BoxTensor* in[] = {&s};
  ComputeStepIr step = Compute(0, ComputeOp::kSoftmax, {"s"}, "p", IrBox({{0, 2}, {0, 3}}));
  step.perm = {1, 0};  // transpose's attribute: not read by softmax
  ASSERT_OK_AND_ASSIGN(BoxTensor rows, RunComputeStep(step, in));  // softmax_axis -1
  step.softmax_axis = 0;
  ASSERT_OK_AND_ASSIGN(BoxTensor cols, RunComputeStep(step, in));
  const std::vector<float> r = rows.tensor.ToFloatVector(), c = cols.tensor.ToFloatVector();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      double row_sum = 0, col_sum = 0;
      for (int k = 0; k < 3; ++k) row_sum += std::exp(x[i * 3 + k]);
      for (int k = 0; k < 2; ++k) col_sum += std::exp(x[k * 3 + j]);
      EXPECT_NEAR(r[i * 3 + j], std::exp(x[i * 3 + j]) / row_sum, 1e-6) << i << "," << j;
      EXPECT_NEAR(c[i * 3 + j], std::exp(x[i * 3 + j]) / col_sum, 1e-6) << i << "," << j;
    }
  }
}

TEST(ComputeStepTest, AnAxisOutsideTheOutBoxNamesItsField) {
  ComputeStepIr pos = Compute(0, ComputeOp::kPositions, {}, "pos", IrBox({{0, 2}}), kWireInt32);
  pos.positions_axis = 1;
  EXPECT_THAT(RunComputeStep(pos, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "positions_axis 1 is out of range"));
  BoxTensor x = Values(Box({{0, 2}, {0, 4}}), 0.0f);
  const BoxTensor* in[] = {&x};
  ComputeStepIr rope = Compute(0, ComputeOp::kRope, {"x"}, "r", IrBox({{0, 2}, {0, 4}}));
  rope.rope_seq_axis = -3;
  EXPECT_THAT(RunComputeStep(rope, in),
              StatusIs(absl::StatusCode::kInvalidArgument, "rope_seq_axis -3 is out of range"));
}

TEST(ComputeStepTest, EmbedIdOutsideTheVocabularyIsAnError) {
  BoxTensor ids = *BoxTensor::Wrap(Box({{0, 3}}), *Tensor::FromInt32({3}, {1, 7, 2}));
  BoxTensor table = Values(Box({{0, 4}, {0, 2}}), 0.0f);  // this device's rows 0:4 of 6
  ComputeStepIr step =
      Compute(0, ComputeOp::kEmbed, {"ids", "t"}, "e", IrBox({{0, 3}, {0, 2}}), kWireFloat32);
  step.vocab_size = 6;
  const BoxTensor* in[] = {&ids, &table};
  EXPECT_THAT(RunComputeStep(step, in),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "embed: id 7 is outside the vocabulary [0, 6)"));
  step.vocab_size = 8;  // 7 is another device's row: a zero row here
  ASSERT_OK_AND_ASSIGN(BoxTensor out, RunComputeStep(step, in));
  EXPECT_EQ(out.tensor.ToFloatVector()[2], 0.0f);
}

}  // namespace
}  // namespace meshserve
