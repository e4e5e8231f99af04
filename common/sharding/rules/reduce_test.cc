#include "common/sharding/rules/reduce.h"

#include <optional>
#include <vector>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

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
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0}, SpecOrDie("P(None, unreduced={'x'})")),
              HasType("float32[2]{U:x}"));
  EXPECT_THAT(ReduceRule("reduce_sum", x_, std::vector<int64_t>{0}, SpecOrDie("P(None, unreduced={'y'})")),
              StatusIs(kInvalid, "unreduced axes should be in operand's specs"));
}

TEST_F(ShapeOpsTest, Cumsum) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {2, 8}, "P(None, 'x')"), 0),
              HasType("float32[2,8@x]"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {2, 8}, "P(None, 'x')"), 1),
              StatusIs(kInvalid, "Input should be unsharded over the axis being reduced"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {8, 2}, "P()"), std::nullopt),
              HasType("float32[16]"));
  EXPECT_THAT(CumulativeRule("cumsum", Arr(mesh, {8, 2}, "P('x')"), std::nullopt),
              StatusIs(kInvalid, "fully replicated"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
