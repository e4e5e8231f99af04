#include "common/sharding/rules/concat_slice.h"

#include <array>
#include <vector>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST_F(ShapeOpsTest, Concatenate) {  // test_concatenate (mesh x=2, y=1)
  Mesh mesh = MeshOrDie("mesh[x=2,y=1]");
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

// tests/pjit_test.py test_dynamic_slice: dynamic_slice_in_dim(x, 1, 2) on
// f32[16@x] keeps P('x'); slicing.py _get_sharding_for_varying_out_shape.
TEST(DynamicSliceRuleTest, VaryingOutShape) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  ArrayType i32 = Arr(mesh, {}, "P()", DType::kInt32);
  const ArrayType one[] = {i32};
  const ArrayType two[] = {i32, i32};
  EXPECT_THAT(DynamicSliceRule(Arr(mesh, {16}, "P('x')"), one, {2}), HasType("float32[2@x]"));
  EXPECT_THAT(DynamicSliceRule(Arr(mesh, {16, 4}, "P('x', None)"), two, {3, 4}),
              StatusIs(kInvalid, "dynamic_slice on sharded dims where out dim (3) is not "
                                 "divisible by mesh axes (2)"));
  EXPECT_THAT(DynamicSliceRule(Arr(mesh, {16, 4}, "P('x', None)"), two, {4, 3}),
              HasType("float32[4@x,3]"));
  EXPECT_THAT(DynamicSliceRule(Arr(mesh, {16, 4}, "P('x', None)"), two, {1, 1}),
              HasType("float32[1,1]"));
}

TEST(DynamicSliceRuleTest, ShapeChecks) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  ArrayType x = Arr(mesh, {16}, "P('x')");
  const ArrayType none[] = {Arr(mesh, {}, "P()", DType::kInt32)};
  EXPECT_THAT(DynamicSliceRule(x, none, {17}), StatusIs(kInvalid, "less than or equal"));
  EXPECT_THAT(DynamicSliceRule(x, none, {-1}), StatusIs(kInvalid, "greater than or equal"));
  const ArrayType vec[] = {Arr(mesh, {2}, "P()", DType::kInt32)};
  EXPECT_THAT(DynamicSliceRule(x, vec, {2}), StatusIs(kInvalid, "must be scalars"));
  const ArrayType flt[] = {Arr(mesh, {}, "P()")};
  EXPECT_THAT(DynamicSliceRule(x, flt, {2}), StatusIs(kInvalid, "must be integers"));
  EXPECT_THAT(DynamicSliceRule(x, {}, {2}), StatusIs(kInvalid, "Length of slice indices"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
