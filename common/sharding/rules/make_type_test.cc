#include "common/sharding/rules/make_type.h"

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(MakeTypeRuleTest, TypeStringsAndDivisibility) {  // test_aval_repr
  Mesh mesh = MeshOrDie("mesh[model=2,data=2]");
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {128, 64}, mesh, SpecOrDie("P('model', 'data')")),
              HasType("float32[128@model,64@data]"));
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {128, 64}, mesh, SpecOrDie("P(('model', 'data'), None)")),
              HasType("float32[128@(model,data),64]"));
  Mesh x = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(MakeTypeRule(DType::kInt32, {5, 2}, x, SpecOrDie("P('x')")),
              StatusIs(kInvalid, "does not evenly divide the dimension size 5"));
  Mesh mixed = MeshOrDie("mesh[x=2,y=2:Auto]");
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {8, 4}, mixed, SpecOrDie("P(('x', 'y'), None)")),
              HasType("float32[8@x,4]"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
