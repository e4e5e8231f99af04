// RunComputeStep's new ops (compute_step.h): the global offsets of positions,
// rope and the causal mask come from the step's out_box; each op reads its own
// axis attribute (positions_axis, rope_seq_axis, softmax_axis); embed's
// vocab_size check; a param's slice read in place (ParamSliceOf, rhs_in_place,
// DotGeneralInPlace) against the copied slice and naive loops. Expected values are naive loops (or the whole-array kernel, itself
// tested against naive loops in attention_test.cc, sliced to the box).
#include "common/program/compute_step.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/tensor/dot_general.h"
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
                               DType::kInt32);
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
  ComputeStepIr pos = Compute(0, ComputeOp::kPositions, {}, "pos", IrBox({{0, 2}}), DType::kInt32);
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
      Compute(0, ComputeOp::kEmbed, {"ids", "t"}, "e", IrBox({{0, 3}, {0, 2}}), DType::kFloat32);
  step.vocab_size = 6;
  const BoxTensor* in[] = {&ids, &table};
  EXPECT_THAT(RunComputeStep(step, in),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "embed: id 7 is outside the vocabulary [0, 6)"));
  step.vocab_size = 8;  // 7 is another device's row: a zero row here
  ASSERT_OK_AND_ASSIGN(BoxTensor out, RunComputeStep(step, in));
  EXPECT_EQ(out.tensor.ToFloatVector()[2], 0.0f);
}

// A resident param's box: rows 2:7 of a [9, 6] table (a device's block).
BoxTensor ParamBlock() { return Values(Box({{2, 7}, {0, 6}}), -1.0f); }

// The param's element at global (r, c).
float ParamAt(const BoxTensor& p, int64_t r, int64_t c) {
  return p.tensor.data<float>()[(r - p.box[0].begin) * p.box[1].size() + c - p.box[1].begin];
}

CopyStepIr SliceCopy(const BoxIr& box) {
  return Copy(0, "param/w", box, 0, "ws", box, DType::kFloat32);
}

TEST(ParamSliceTest, OnlyAWholeUnchangedBoxOfAFloatMatrixParamIsReadInPlace) {
  const BoxTensor param = ParamBlock();
  const BoxIr rows = IrBox({{3, 6}, {0, 6}});
  std::optional<ParamSlice> slice = ParamSliceOf(SliceCopy(rows), param);
  ASSERT_TRUE(slice.has_value());
  EXPECT_EQ(slice->param, &param);  // the param's own buffer: nothing copied
  EXPECT_EQ(slice->box, Box({{3, 6}, {0, 6}}));
  CopyStepIr unset_dtype = SliceCopy(rows);
  unset_dtype.dtype = std::nullopt;
  EXPECT_TRUE(ParamSliceOf(unset_dtype, param).has_value());

  std::vector<CopyStepIr> copied(7, SliceCopy(rows));
  copied[0].src = "w";                                // not a param
  copied[1].dst_device = 1;                           // another device
  copied[2].accumulate = true;                        // adds into the destination
  copied[3].dtype = DType::kBFloat16;                    // converted
  copied[4].dst_box = IrBox({{0, 9}, {0, 6}});        // part of its destination
  copied[5] = SliceCopy(IrBox({{1, 4}, {0, 6}}));     // outside the param's box
  copied[6] = SliceCopy(IrBox({{3, 6}, {0, 7}}));
  for (size_t i = 0; i < copied.size(); ++i) {
    EXPECT_FALSE(ParamSliceOf(copied[i], param).has_value()) << "case " << i;
  }
  const BoxTensor vector = Values(Box({{0, 6}}), 0.0f);  // rank 1
  EXPECT_FALSE(ParamSliceOf(SliceCopy(IrBox({{0, 6}})), vector).has_value());
  ASSERT_OK_AND_ASSIGN(BoxTensor bf16, BoxTensor::Create(DType::kBFloat16, param.box));
  EXPECT_FALSE(ParamSliceOf(SliceCopy(rows), bf16).has_value());
}

// A dot_general whose rhs is a row slice (contiguous) or a column slice
// (strided) of the param, read in place: the copied slice's numbers and the
// naive sum, for one row (sgemv), a few (GemmSmallM / sgemm) and many (sgemm).
TEST(ParamSliceTest, DotGeneralReadsTheSliceInPlace) {
  const BoxTensor param = ParamBlock();
  struct Case {
    Box box;
    int64_t rhs_contracting;
  };
  const Case cases[] = {{Box({{3, 6}, {0, 6}}), 1},   // vocabulary rows, W [N, K]
                        {Box({{2, 7}, {1, 4}}), 1},   // feature columns, W [N, K]
                        {Box({{2, 7}, {1, 4}}), 0},   // strided, W [K, N]
                        {Box({{4, 7}, {0, 6}}), 0}};  // contiguous, W [K, N]
  for (const Case& c : cases) {
    for (int64_t m : {1, 3, 40}) {
      SCOPED_TRACE(c.box.ToString() + " contracting " + std::to_string(c.rhs_contracting) +
                   " M " + std::to_string(m));
      const int64_t k = c.box[static_cast<int>(c.rhs_contracting)].size();
      const int64_t n = c.box[static_cast<int>(1 - c.rhs_contracting)].size();
      const BoxTensor x = Values(Box({{0, 1}, {0, m}, {0, k}}), 0.5f);
      ComputeStepIr step = Compute(0, ComputeOp::kDotGeneral, {"x", "ws"}, "y",
                                   IrBox({{0, 1}, {0, m}, {0, n}}), DType::kFloat32);
      step.lhs_contracting = {2};
      step.rhs_contracting = {c.rhs_contracting};
      const ParamSlice slice{&param, c.box};
      const BoxTensor* in_place[] = {&x, nullptr};
      ASSERT_OK_AND_ASSIGN(BoxTensor got, RunComputeStep(step, in_place, nullptr, &slice));
      ASSERT_OK_AND_ASSIGN(BoxTensor copy, CopyParamSlice(slice));
      const BoxTensor* copied[] = {&x, &copy};
      ASSERT_OK_AND_ASSIGN(BoxTensor want, RunComputeStep(step, copied));
      ASSERT_EQ(got.tensor.shape(), want.tensor.shape());
      const std::vector<float> g = got.tensor.ToFloatVector(), w = want.tensor.ToFloatVector();
      const std::vector<float> xs = x.tensor.ToFloatVector();
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l) {
            const int64_t r = c.box[0].begin + (c.rhs_contracting == 1 ? j : l);
            const int64_t col = c.box[1].begin + (c.rhs_contracting == 1 ? l : j);
            sum += static_cast<double>(xs[i * k + l]) * ParamAt(param, r, col);
          }
          EXPECT_NEAR(g[i * n + j], sum, 1e-4) << i << "," << j;
          EXPECT_NEAR(g[i * n + j], w[i * n + j], 1e-4) << i << "," << j;
        }
      }
    }
  }
}

// Any other step (or a dot_general with batch dims) reads a copy: the same
// numbers as the copied slice.
TEST(ParamSliceTest, OtherStepsReadACopy) {
  const BoxTensor param = ParamBlock();
  const ParamSlice slice{&param, Box({{3, 5}, {1, 4}})};
  ASSERT_OK_AND_ASSIGN(BoxTensor copy, CopyParamSlice(slice));
  EXPECT_EQ(copy.box, slice.box);
  EXPECT_EQ(copy.tensor.ToFloatVector()[4], ParamAt(param, 4, 2));
  const BoxTensor x = Values(Box({{3, 5}, {1, 4}}), 2.0f);
  ComputeStepIr add = Compute(0, ComputeOp::kAdd, {"x", "ws"}, "y", IrBox({{3, 5}, {1, 4}}));
  const BoxTensor* in_place[] = {&x, nullptr};
  const BoxTensor* copied[] = {&x, &copy};
  ASSERT_OK_AND_ASSIGN(BoxTensor got, RunComputeStep(add, in_place, nullptr, &slice));
  ASSERT_OK_AND_ASSIGN(BoxTensor want, RunComputeStep(add, copied));
  EXPECT_EQ(got.tensor, want.tensor);
  const BoxTensor* no_lhs[] = {nullptr, nullptr};
  EXPECT_THAT(RunComputeStep(add, no_lhs, nullptr, &slice),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs input 0 and 1"));
}

// The stride is the leading dimension: the padding columns (NaN) are never
// read, and the weight is read where it lies.
TEST(DotGeneralInPlaceTest, ReadsOnlyTheStridedColumns) {
  std::vector<float> table(4 * 8, std::nanf(""));
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) table[r * 8 + c] = 0.25f * static_cast<float>(r * 5 + c) - 2;
  }
  const StridedMatrix w{table.data(), 4, 5, 8};
  for (int64_t m : {1, 2, 20}) {
    std::vector<float> xv(m * 5);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues(DType::kFloat32, {m, 5}, xv));
    ASSERT_OK_AND_ASSIGN(Tensor y, DotGeneralInPlace(x, w, 1, DType::kFloat32));
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{m, 4}));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        float sum = 0;
        for (int64_t l = 0; l < 5; ++l) sum += xv[i * 5 + l] * table[j * 8 + l];
        EXPECT_NEAR(y.data<float>()[i * 4 + j], sum, 1e-5) << "M " << m;
      }
    }
  }
  ASSERT_OK_AND_ASSIGN(Tensor x4, Tensor::Create(DType::kFloat32, {2, 4}));
  EXPECT_THAT(DotGeneralInPlace(x4, w, 1, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "contracting dim sizes differ"));
  EXPECT_THAT(DotGeneralInPlace(x4, w, 2, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "contracting 0 or 1"));
  EXPECT_THAT(DotGeneralInPlace(x4, StridedMatrix{table.data(), 4, 5, 4}, 0, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "row_stride 4"));
  ASSERT_OK_AND_ASSIGN(Tensor ids, Tensor::Create(DType::kInt32, {2, 4}));
  EXPECT_THAT(DotGeneralInPlace(ids, w, 0, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace meshserve
