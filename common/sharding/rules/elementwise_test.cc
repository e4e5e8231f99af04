#include "common/sharding/rules/elementwise.h"

#include <vector>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

absl::StatusOr<ArrayType> Binary(absl::string_view op, const ArrayType& a, const ArrayType& b) {
  std::vector<ArrayType> ops = {a, b};
  return ElementwiseRule(op, ops);
}

TEST(ElementwiseRuleTest, SameShardingIsKept) {
  Mesh mesh = MeshOrDie("mesh[fsdp=2,model=4]");
  ArrayType g = Arr(mesh, {8, 4096, 8192}, "P('fsdp', None, 'model')");
  EXPECT_THAT(Binary("mul", g, g), HasType("float32[8@fsdp,4096,8192@model]"));
}

TEST(ElementwiseRuleTest, ReplicatedOperandIsNotAnError) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  // test_fully_replicated_array_mul: [8,2]P('x','y') * [1,2]P(None,None).
  EXPECT_THAT(Binary("mul", Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {1, 2}, "P(None, None)")),
              HasType("float32[8@x,2@y]"));
  EXPECT_THAT(Binary("mul", Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {8, 2}, "P(('x',), ('y',))")),
              HasType("float32[8@x,2@y]"));
  // [8@x] + [8]: the sharded entry wins.
  EXPECT_THAT(Binary("add", Arr(mesh, {8}, "P('x')"), Arr(mesh, {8}, "P()")),
              HasType("float32[8@x]"));
  // Scalars are ignored; lower ranks are lifted.
  EXPECT_THAT(Binary("add", Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {}, "P()")),
              HasType("float32[8@x,2@y]"));
  EXPECT_THAT(Binary("add", Arr(mesh, {8, 2}, "P('x', None)"), Arr(mesh, {2}, "P('y')")),
              HasType("float32[8@x,2@y]"));
}

TEST(ElementwiseRuleTest, IncompatibleShardings) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(Binary("mul", Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {8, 2}, "P('y', 'x')")),
              StatusIs(kInvalid, "mul got incompatible shardings for broadcasting: ('x', 'y'), "
                                 "('y', 'x')."));
  EXPECT_THAT(Binary("mul", Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {8, 2}, "P(('x', 'y'))")),
              StatusIs(kInvalid, "mul got incompatible shardings for broadcasting"));
}

TEST(ElementwiseRuleTest, DuplicateAxisInResult) {
  Mesh mesh = MeshOrDie("mesh[X=4,Y=2]");
  EXPECT_THAT(Binary("add", Arr(mesh, {4, 4}, "P('X', None)"), Arr(mesh, {4, 4}, "P(None, 'X')")),
              StatusIs(kInvalid, "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an "
                                 "illegally sharded result: f32[4@X,4@X]"));
}

TEST(ElementwiseRuleTest, OuterProduct) {
  Mesh mesh = MeshOrDie("mesh[X=4,Y=2]");
  EXPECT_THAT(Binary("add", Arr(mesh, {4, 1}, "P('X', None)", DType::kInt32),
                     Arr(mesh, {1, 8}, "P(None, 'Y')", DType::kInt32)),
              HasType("int32[4@X,8@Y]"));
}

TEST(ElementwiseRuleTest, ShapesMustBroadcast) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(Binary("add", Arr(mesh, {8, 2}, "P()"), Arr(mesh, {4, 2}, "P()")),
              StatusIs(kInvalid, "add got incompatible shapes for broadcasting: (8, 2), (4, 2)."));
}

TEST(ElementwiseRuleTest, UnreducedOperandsStayUnreduced) {  // test_in_and_out_unreduced
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType u = Arr(mesh, {8, 8}, "P('x', None, unreduced={'y'})");
  EXPECT_THAT(Binary("add", u, u), HasType("float32[8@x,8]{U:y}"));
  EXPECT_THAT(Binary("add", u, Arr(mesh, {8, 8}, "P('x', None)")),
              StatusIs(kInvalid, "different unreduced axes"));
}

TEST(SelectRuleTest, CasesMustMatch) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType pred = Arr(mesh, {8, 2}, "P('x', 'y')", DType::kBool);
  ArrayType a = Arr(mesh, {8, 2}, "P('x', 'y')");
  EXPECT_THAT(SelectRule(pred, a, a), HasType("float32[8@x,2@y]"));
  EXPECT_THAT(SelectRule(pred, a, Arr(mesh, {8, 2}, "P('y', 'x')")),
              StatusIs(kInvalid, "select cases must have the same shardings"));
  EXPECT_THAT(SelectRule(Arr(mesh, {8, 2}, "P()", DType::kBool), a, a),
              StatusIs(kInvalid, "select `which` must be scalar or have the same sharding"));
  // jnp.where(x > 0, x, 0): scalar cases are broadcast.
  EXPECT_THAT(SelectRule(Arr(mesh, {}, "P()", DType::kBool), a, a), HasType("float32[8@x,2@y]"));
  EXPECT_THAT(SelectRule(pred, a, Arr(mesh, {}, "P()")), HasType("float32[8@x,2@y]"));
}

TEST(UnaryRuleTest, KeepsTheType) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(UnaryRule("sin", Arr(mesh, {8, 2}, "P('x', 'y')")), HasType("float32[8@x,2@y]"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
