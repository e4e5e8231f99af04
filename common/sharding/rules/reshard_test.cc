#include "common/sharding/rules/reshard.h"

#include <optional>
#include <string>
#include <vector>

#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(ReshardRuleTest, ResultIsOutSharding) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType a = Arr(mesh, {8, 2}, "P('x', 'y')");
  EXPECT_THAT(ReshardRule(a, SpecOrDie("P('x', None)")), HasType("float32[8@x,2]"));
  EXPECT_THAT(ReshardRule(a, SpecOrDie("P('y')")), HasType("float32[8@y,2]"));
  EXPECT_THAT(ReshardRule(a, std::nullopt), StatusIs(kInvalid, "non-None"));
  EXPECT_THAT(ReshardRule(a, SpecOrDie("P(None, ('x', 'y'))")),
              StatusIs(kInvalid, "does not evenly divide the dimension size"));
  EXPECT_THAT(ReshardRule(a, SpecOrDie("P('z')")), StatusIs(kInvalid, "z"));
  EXPECT_THAT(ReshardRule(a, SpecOrDie("P(None, None, 'x')")), StatusIs(kInvalid, "Length of sharding.spec"));
}

TEST(AutoAxesRuleTest, MatmulUnderAutoAxes) {  // test_auto_axes_top_level
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  std::vector<ArrayType> args = {Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {2, 8}, "P('y', 'x')")};
  auto matmul = [](absl::Span<const ArrayType> in) {
    return DotGeneralRule(in[0], in[1], Matmul(), std::nullopt);
  };
  EXPECT_THAT(AutoAxesRule(args, SpecOrDie("P('x', None)"), std::nullopt, matmul),
              HasType("float32[8@x,8]"));
  EXPECT_THAT(AutoAxesRule(args, std::nullopt, std::nullopt, matmul),
              StatusIs(kInvalid, "Missing required keyword argument: 'out_sharding'"));
  // Only x goes Auto: y still Explicit inside, where the contraction is
  // sharded on both sides.
  EXPECT_THAT(AutoAxesRule(args, SpecOrDie("P('x', None)"), std::vector<std::string>{"x"}, matmul),
              StatusIs(kInvalid, "Contracting dimensions are sharded"));
}

TEST(AutoAxesRuleTest, BodySeesAxesRemoved) {  // test_auto_axes_no_context_mesh
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  std::vector<ArrayType> args = {Arr(mesh, {8, 2}, "P('x', 'y')")};
  std::string seen;
  auto sin = [&](absl::Span<const ArrayType> in) -> absl::StatusOr<ArrayType> {
    seen = in[0].ToString();
    return in[0];
  };
  EXPECT_THAT(AutoAxesRule(args, SpecOrDie("P('x', 'y')"), std::vector<std::string>{"x"}, sin),
              HasType("float32[8@x,2@y]"));
  EXPECT_EQ(seen, "float32[8,2@y]");
}

TEST(ShardMapBodyTypeRuleTest, ManualAxesBecomeVarying) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType a = Arr(mesh, {8, 2}, "P('x', 'y')", DType::kInt32);
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::vector<std::string>{"x"}), HasType("int32[4,2@y]{V:x}"));
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::nullopt), HasType("int32[4,1]{V:(x,y)}"));
  EXPECT_THAT(ShardMapBodyTypeRule(Arr(mesh, {8, 2}, "P(None, 'y')"), std::vector<std::string>{"x"}),
              HasType("float32[8,2@y]"));
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::vector<std::string>{"q"}), StatusIs(kInvalid, "q"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
