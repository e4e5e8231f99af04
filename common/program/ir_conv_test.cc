// The core types (Box, DType, Mesh) survive a round trip through the IR
// (ir_conv.h), and the IR's dtype numbers are tensor.proto's.
#include "common/program/ir_conv.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

TEST(IrConvTest, CoreTypesRoundTripThroughTheIr) {
  const Box box{{1, 3}, {0, 8}};
  EXPECT_EQ(UncheckedBoxFromIr(BoxToIr(box)), box);
  // Not IsOkAndHolds(box): copying a Box into a matcher trips a GCC 12 false
  // -Wmaybe-uninitialized inside absl::InlinedVector.
  ASSERT_OK_AND_ASSIGN(const Box back, BoxFromIr(BoxToIr(box)));
  EXPECT_EQ(back, box);
  EXPECT_THAT(BoxFromIr(BoxIr{{0, 1}, {2}}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BoxFromIr(BoxIr{{3}, {2}}), StatusIs(absl::StatusCode::kInvalidArgument));
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kInt32, DType::kInt64,
                  DType::kFloat16, DType::kFloat64, DType::kInt8, DType::kUInt8,
                  DType::kBool}) {
    EXPECT_THAT(DTypeFromProto(DTypeToProto(d)), IsOkAndHolds(d));
  }
  EXPECT_EQ(DTypeToProto(DType::kFloat32), FLOAT32);
  EXPECT_EQ(DTypeToProto(DType::kBool), BOOL);
  EXPECT_THAT(DTypeFromProto(DTYPE_INVALID), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DTypeFromProto(42), StatusIs(absl::StatusCode::kInvalidArgument, "dtype 42"));
  // A field that may be unset: DTYPE_INVALID is nullopt, unknown numbers fail.
  EXPECT_THAT(OptionalDTypeFromProto(DTYPE_INVALID), IsOkAndHolds(std::nullopt));
  EXPECT_THAT(OptionalDTypeFromProto(BFLOAT16), IsOkAndHolds(DType::kBFloat16));
  EXPECT_THAT(OptionalDTypeFromProto(42), StatusIs(absl::StatusCode::kInvalidArgument, "42"));
  EXPECT_EQ(OptionalDTypeToProto(std::nullopt), DTYPE_INVALID);
  EXPECT_EQ(OptionalDTypeToProto(DType::kInt8), INT8);
  ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"data", 2}, {"model", 4}}));
  EXPECT_THAT(MeshFromIr(MeshToIr(mesh)), IsOkAndHolds(mesh));
}

TEST(IrConvTest, OnlyADotGeneralsRhsIsReadInPlace) {
  ComputeStepIr dot;
  dot.op = ComputeOp::kDotGeneral;
  dot.inputs = {"x", "w"};
  EXPECT_TRUE(ReadsInPlace(dot, 1));
  EXPECT_FALSE(ReadsInPlace(dot, 0));  // the lhs
  ComputeStepIr add = dot;
  add.op = ComputeOp::kAdd;
  EXPECT_FALSE(ReadsInPlace(add, 1));
  ComputeStepIr three = dot;
  three.inputs.push_back("b");
  EXPECT_FALSE(ReadsInPlace(three, 1));
}

}  // namespace
}  // namespace meshserve
