// Tests for layout_ops, reduce, concat_slice and conv rules.
#include <array>
#include <optional>
#include <vector>

#include "common/sharding/rules/concat_slice.h"
#include "common/sharding/rules/conv.h"
#include "common/sharding/rules/layout_ops.h"
#include "common/sharding/rules/reduce.h"
#include "common/sharding/rules/rules_testing.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::rules_testing::Arr;
using ::meshserve::rules_testing::HasType;
using ::meshserve::rules_testing::Spec;
using ::meshserve::rules_testing::TestMesh;
using ::meshserve::testing::StatusIs;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

class ShapeOpsTest : public ::testing::Test {
 protected:
  Mesh mesh_ = TestMesh("mesh[x=2,y=2]");
  ArrayType x_ = Arr(mesh_, {8, 2}, "P('x', 'y')");
};

TEST_F(ShapeOpsTest, Transpose) {
  Mesh mesh = TestMesh("mesh[x=2,y=2,z=1]");
  EXPECT_THAT(TransposeRule(Arr(mesh, {4, 2, 2}, "P('x', 'y', 'z')"), {1, 2, 0}),
              HasType("float32[2@y,2@z,4@x]"));
  EXPECT_THAT(TransposeRule(x_, {0, 0}), StatusIs(kInvalid, "permutation"));
}

TEST_F(ShapeOpsTest, ExpandDims) {  // test_broadcast_in_dim
  EXPECT_THAT(ExpandDimsRule(x_, {0}), HasType("float32[1,8@x,2@y]"));
  EXPECT_THAT(ExpandDimsRule(x_, {1}), HasType("float32[8@x,1,2@y]"));
  EXPECT_THAT(ExpandDimsRule(x_, {2}), HasType("float32[8@x,2@y,1]"));
  EXPECT_THAT(ExpandDimsRule(x_, {-1}), HasType("float32[8@x,2@y,1]"));
  EXPECT_THAT(ExpandDimsRule(x_, {3}), StatusIs(kInvalid, "out of bounds"));
}

TEST_F(ShapeOpsTest, Squeeze) {
  EXPECT_THAT(SqueezeRule(Arr(mesh_, {4, 4, 1}, "P('x', None, None)"), std::vector<int64_t>{2}),
              HasType("float32[4@x,4]"));
  EXPECT_THAT(SqueezeRule(x_, std::vector<int64_t>{1}), StatusIs(kInvalid, "size not equal to one"));
}

TEST_F(ShapeOpsTest, BroadcastTo) {
  Mesh mesh = TestMesh("mesh[x=2,y=2,z=2]");
  ArrayType a = Arr(mesh, {1, 24}, "P(None, ('y', 'z'))");
  EXPECT_THAT(BroadcastToRule(a, {8, 24}, Spec("P('x', ('y', 'z'))")),
              HasType("float32[8@x,24@(y,z)]"));
  EXPECT_THAT(BroadcastToRule(a, {3, 8, 24}, std::nullopt), HasType("float32[3,8,24@(y,z)]"));
  EXPECT_THAT(BroadcastToRule(a, {8, 12}, std::nullopt), StatusIs(kInvalid, "Incompatible shapes"));
}

TEST_F(ShapeOpsTest, Reductions) {  // test_reduce_sum / test_reduce_max
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::nullopt), HasType("float32[]"));
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0}), HasType("float32[2@y]"));
  EXPECT_THAT(ReduceRule("reduce_max", x_, std::vector<int64_t>{1}), HasType("float32[8@x]"));
  ArrayType xy = Arr(mesh_, {8, 2}, "P(('x', 'y'), None)");
  EXPECT_THAT(ReduceRule("reduce_sum", xy, std::vector<int64_t>{0}), HasType("float32[2]"));
  EXPECT_THAT(ReduceRule("reduce_sum", xy, std::vector<int64_t>{1}), HasType("float32[8@(x,y)]"));
  EXPECT_THAT(ReduceRule("argmax", x_, std::vector<int64_t>{0}), HasType("int32[2@y]"));
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0, 0}), StatusIs(kInvalid, "duplicate"));
}

TEST_F(ShapeOpsTest, ReduceSumUnreducedOutSharding) {
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0}, Spec("P(None, unreduced={'x'})")),
              HasType("float32[2]{U:x}"));
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0}, Spec("P(None, unreduced={'y'})")),
              StatusIs(kInvalid, "unreduced axes should be in operand's specs"));
}

TEST_F(ShapeOpsTest, Cumsum) {
  Mesh mesh = TestMesh("mesh[x=2]");
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {2, 8}, "P(None, 'x')"), 0),
              HasType("float32[2,8@x]"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {2, 8}, "P(None, 'x')"), 1),
              StatusIs(kInvalid, "Input should be unsharded over the axis being reduced"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {8, 2}, "P()"), std::nullopt),
              HasType("float32[16]"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {8, 2}, "P('x')"), std::nullopt),
              StatusIs(kInvalid, "fully replicated"));
}

TEST_F(ShapeOpsTest, Concatenate) {  // test_concatenate (mesh x=2, y=1)
  Mesh mesh = TestMesh("mesh[x=2,y=1]");
  std::vector<ArrayType> ok = {Arr(mesh, {4, 4}, "P('x', 'y')"), Arr(mesh, {4, 1}, "P('x', 'y')")};
  EXPECT_THAT(ConcatenateRule(ok, 1), HasType("float32[4@x,5@y]"));
  std::vector<ArrayType> bad = {Arr(mesh, {4, 4}, "P('x', 'y')"), Arr(mesh, {4, 1}, "P('x')")};
  EXPECT_THAT(ConcatenateRule(bad, 1), StatusIs(kInvalid, "All operands should have the same sharding"));
  std::vector<ArrayType> shapes = {Arr(mesh, {4, 4}, "P()"), Arr(mesh, {3, 1}, "P()")};
  EXPECT_THAT(ConcatenateRule(shapes, 1), StatusIs(kInvalid, "same shape"));
}

TEST_F(ShapeOpsTest, Stack) {
  std::vector<ArrayType> ops = {x_, x_};
  EXPECT_THAT(StackRule(ops, 0), HasType("float32[2,8@x,2@y]"));
  EXPECT_THAT(StackRule(ops, -1), HasType("float32[8@x,2@y,2]"));
  std::vector<ArrayType> bad = {x_, Arr(mesh_, {8, 2}, "P('x', None)")};
  EXPECT_THAT(StackRule(bad, 0), StatusIs(kInvalid, "All operands should have the same sharding"));
}

TEST_F(ShapeOpsTest, SliceSplitPad) {
  ArrayType a = Arr(mesh_, {4, 4}, "P('x', None)");
  EXPECT_THAT(SliceRule(a, {0, 0}, {4, 3}), HasType("float32[4@x,3]"));
  EXPECT_THAT(SliceRule(Arr(mesh_, {4, 4}, "P('x', 'y')"), {0, 0}, {4, 3}),
              StatusIs(kInvalid, "slicing on sharded dims where out dim (3) is not divisible by "
                                 "mesh axes (2)"));
  EXPECT_THAT(SliceRule(Arr(mesh_, {4, 4}, "P(None, ('x', 'y'))"), {0, 0}, {4, 3}),
              StatusIs(kInvalid, "slicing on sharded dims"));
  EXPECT_THAT(SliceRule(a, {0, 0}, {5, 3}), StatusIs(kInvalid, "out of range"));
  ASSERT_OK_AND_ASSIGN(std::vector<ArrayType> parts, SplitRule(x_, {4, 4}, 0));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].ToString(), "float32[4@x,2@y]");
  EXPECT_THAT(SplitRule(x_, {1, 1}, 1), StatusIs(kInvalid, "split on sharded dims"));
  ArrayType v = Arr(mesh_, {8}, "P('x')");
  using Cfg = std::vector<std::array<int64_t, 3>>;
  EXPECT_THAT(PadRule(v, Cfg{{2, 2, 0}}), HasType("float32[12@x]"));
  EXPECT_THAT(PadRule(v, Cfg{{0, 0, 0}}), HasType("float32[8@x]"));
  EXPECT_THAT(PadRule(v, Cfg{{0, 3, 1}}), HasType("float32[18@x]"));
  EXPECT_THAT(PadRule(v, Cfg{{2, 3, 0}}), StatusIs(kInvalid, "padding on sharded dims"));
  EXPECT_THAT(PadRule(Arr(mesh_, {8}, "P(('x', 'y'))"), Cfg{{4, 4, 1}}),
              StatusIs(kInvalid, "padding on sharded dims"));
}

TEST_F(ShapeOpsTest, Tile) {
  ArrayType a = Arr(mesh_, {32, 64}, "P('x', None)");
  EXPECT_THAT(TileRule(a, {1, 2}), HasType("float32[32@x,128]"));
  EXPECT_THAT(TileRule(a, {3, 1, 1}), HasType("float32[3,32@x,64]"));
  EXPECT_THAT(TileRule(a, {2, 1}), StatusIs(kInvalid, "tiling is non-trivial"));
}

TEST(ConvRuleTest, SpatialShardingFollowsTheInput) {  // test_conv_general_dilated
  Mesh mesh = TestMesh("mesh[x=4,y=2]");
  ConvParams p;
  p.lhs_spec = "NWC";
  p.rhs_spec = "WIO";
  p.out_spec = "NWC";
  p.window_strides = {1};
  p.padding = "SAME";
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, "P('x', 'y')"),
                                     Arr(mesh, {5, 8, 10}, "P()"), p, std::nullopt),
              HasType("float32[16@x,128@y,10]"));
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, "P('x', None, 'y')"),
                                     Arr(mesh, {5, 8, 10}, "P()"), p, std::nullopt),
              StatusIs(kInvalid, "Please specify the output sharding via `out_sharding` "
                                 "parameter of `conv_general_dilated`"));
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, "P('x')"),
                                     Arr(mesh, {5, 8, 10}, "P(None, None, 'y')"), p, std::nullopt),
              StatusIs(kInvalid, "out_sharding"));
  p.padding = "VALID";
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, "P('x', 'y')"),
                                     Arr(mesh, {5, 8, 10}, "P()"), p, std::nullopt),
              HasType("float32[16@x,124@y,10]"));
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, "P('x', 'y')"),
                                     Arr(mesh, {4, 8, 10}, "P()"), p, std::nullopt),
              StatusIs(kInvalid, "conv_general_dilated on sharded dims where out dim (125)"));
}

TEST(ConvRuleTest, NnxConvOutSharding) {  // flax spmd_test test_out_sharding_conv
  Mesh mesh = TestMesh("mesh[X=2,Y=2]");
  ConvParams p{"NWC", "WIO", "NWC", {1}, "SAME", {}, {}, {}, 1, 1};
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {2, 4, 4}, "P('X', None, None)"),
                                     Arr(mesh, {3, 4, 8}, "P()"), p, Spec("P('X', 'Y', None)")),
              HasType("float32[2@X,4@Y,8]"));
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {2, 4, 4}, "P('X', None, None)"),
                                     Arr(mesh, {3, 4, 8}, "P()"), p, std::nullopt),
              HasType("float32[2@X,4,8]"));
}

}  // namespace
}  // namespace meshserve
