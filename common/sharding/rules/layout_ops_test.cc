#include "common/sharding/rules/layout_ops.h"

#include <optional>
#include <vector>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST_F(ShapeOpsTest, Transpose) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2,z=1]");
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
  Mesh mesh = MeshOrDie("mesh[x=2,y=2,z=2]");
  ArrayType a = Arr(mesh, {1, 24}, "P(None, ('y', 'z'))");
  EXPECT_THAT(BroadcastToRule(a, {8, 24}, SpecOrDie("P('x', ('y', 'z'))")),
              HasType("float32[8@x,24@(y,z)]"));
  EXPECT_THAT(BroadcastToRule(a, {3, 8, 24}, std::nullopt), HasType("float32[3,8,24@(y,z)]"));
  EXPECT_THAT(BroadcastToRule(a, {8, 12}, std::nullopt), StatusIs(kInvalid, "Incompatible shapes"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
