// Tests for reshard / auto_axes / shard_map body types, make_type and the
// model-op rules.
#include "common/sharding/rules/reshard.h"

#include <optional>
#include <vector>

#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/make_type.h"
#include "common/sharding/rules/model_ops.h"
#include "common/sharding/rules/rules_testing.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::rules_testing::Arr;
using ::meshserve::rules_testing::HasType;
using ::meshserve::rules_testing::Matmul;
using ::meshserve::rules_testing::Spec;
using ::meshserve::rules_testing::TestMesh;
using ::meshserve::testing::StatusIs;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(ReshardRuleTest, ResultIsOutSharding) {
  Mesh mesh = TestMesh("mesh[x=2,y=2]");
  ArrayType a = Arr(mesh, {8, 2}, "P('x', 'y')");
  EXPECT_THAT(ReshardRule(a, Spec("P('x', None)")), HasType("float32[8@x,2]"));
  EXPECT_THAT(ReshardRule(a, Spec("P('y')")), HasType("float32[8@y,2]"));
  EXPECT_THAT(ReshardRule(a, std::nullopt), StatusIs(kInvalid, "non-None"));
  EXPECT_THAT(ReshardRule(a, Spec("P(None, ('x', 'y'))")),
              StatusIs(kInvalid, "does not evenly divide the dimension size"));
  EXPECT_THAT(ReshardRule(a, Spec("P('z')")), StatusIs(kInvalid, "z"));
  EXPECT_THAT(ReshardRule(a, Spec("P(None, None, 'x')")), StatusIs(kInvalid, "Length of sharding.spec"));
}

TEST(AutoAxesRuleTest, MatmulUnderAutoAxes) {  // test_auto_axes_top_level
  Mesh mesh = TestMesh("mesh[x=2,y=2]");
  std::vector<ArrayType> args = {Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {2, 8}, "P('y', 'x')")};
  auto matmul = [](absl::Span<const ArrayType> in) {
    return DotGeneralRule(in[0], in[1], Matmul(), std::nullopt);
  };
  EXPECT_THAT(AutoAxesRule(args, Spec("P('x', None)"), std::nullopt, matmul),
              HasType("float32[8@x,8]"));
  EXPECT_THAT(AutoAxesRule(args, std::nullopt, std::nullopt, matmul),
              StatusIs(kInvalid, "Missing required keyword argument: 'out_sharding'"));
  // Only x goes Auto: y still Explicit inside, where the contraction is
  // sharded on both sides.
  EXPECT_THAT(AutoAxesRule(args, Spec("P('x', None)"), std::vector<std::string>{"x"}, matmul),
              StatusIs(kInvalid, "Contracting dimensions are sharded"));
}

TEST(AutoAxesRuleTest, BodySeesAxesRemoved) {  // test_auto_axes_no_context_mesh
  Mesh mesh = TestMesh("mesh[x=2,y=2]");
  std::vector<ArrayType> args = {Arr(mesh, {8, 2}, "P('x', 'y')")};
  std::string seen;
  auto sin = [&](absl::Span<const ArrayType> in) -> absl::StatusOr<ArrayType> {
    seen = in[0].ToString();
    return in[0];
  };
  EXPECT_THAT(AutoAxesRule(args, Spec("P('x', 'y')"), std::vector<std::string>{"x"}, sin),
              HasType("float32[8@x,2@y]"));
  EXPECT_EQ(seen, "float32[8,2@y]");
}

TEST(ShardMapBodyTypeRuleTest, ManualAxesBecomeVarying) {
  Mesh mesh = TestMesh("mesh[x=2,y=2]");
  ArrayType a = Arr(mesh, {8, 2}, "P('x', 'y')", DType::kInt32);
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::vector<std::string>{"x"}), HasType("int32[4,2@y]{V:x}"));
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::nullopt), HasType("int32[4,1]{V:(x,y)}"));
  EXPECT_THAT(ShardMapBodyTypeRule(Arr(mesh, {8, 2}, "P(None, 'y')"), std::vector<std::string>{"x"}),
              HasType("float32[8,2@y]"));
  EXPECT_THAT(ShardMapBodyTypeRule(a, std::vector<std::string>{"q"}), StatusIs(kInvalid, "q"));
}

TEST(MakeTypeRuleTest, TypeStringsAndDivisibility) {  // test_aval_repr
  Mesh mesh = TestMesh("mesh[model=2,data=2]");
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {128, 64}, mesh, Spec("P('model', 'data')")),
              HasType("float32[128@model,64@data]"));
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {128, 64}, mesh, Spec("P(('model', 'data'), None)")),
              HasType("float32[128@(model,data),64]"));
  Mesh x = TestMesh("mesh[x=2]");
  EXPECT_THAT(MakeTypeRule(DType::kInt32, {5, 2}, x, Spec("P('x')")),
              StatusIs(kInvalid, "does not evenly divide the dimension size 5"));
  Mesh mixed = TestMesh("mesh[x=2,y=2:Auto]");
  EXPECT_THAT(MakeTypeRule(DType::kFloat32, {8, 4}, mixed, Spec("P(('x', 'y'), None)")),
              HasType("float32[8@x,4]"));
}

TEST(ModelOpsTest, LinearFollowsNnx) {  // flax spmd_test test_out_sharding_linear_layers
  Mesh mesh = TestMesh("mesh[X=2,Y=2]");
  ArrayType x = Arr(mesh, {2, 2}, "P('X', None)");
  ArrayType w = Arr(mesh, {2, 4}, "P()");
  ArrayType b = Arr(mesh, {4}, "P()");
  EXPECT_THAT(LinearRule(x, w, b, std::nullopt), HasType("float32[2@X,4]"));
  EXPECT_THAT(LinearRule(x, w, b, Spec("P('X', 'Y')")), HasType("float32[2@X,4@Y]"));
  EXPECT_THAT(LinearRule(x, w, Arr(mesh, {4}, "P('X')"), std::nullopt),
              StatusIs(kInvalid, "produces an illegally sharded result"));
  EXPECT_THAT(LinearRule(x, w, Arr(mesh, {3}, "P()"), std::nullopt), StatusIs(kInvalid, "bias"));
}

TEST(ModelOpsTest, NormsSoftmaxActivationsKeepTheInput) {
  Mesh mesh = TestMesh("mesh[fsdp=2,model=4]");
  ArrayType h = Arr(mesh, {8, 16, 64}, "P('fsdp', None, 'model')");
  EXPECT_THAT(NormRule("rms_norm", h, Arr(mesh, {64}, "P('model')"), std::nullopt),
              HasType("float32[8@fsdp,16,64@model]"));
  EXPECT_THAT(NormRule("layer_norm", h, Arr(mesh, {64}, "P()"), Arr(mesh, {64}, "P()")),
              HasType("float32[8@fsdp,16,64@model]"));
  EXPECT_THAT(NormRule("rms_norm", h, Arr(mesh, {64}, "P('fsdp')"), std::nullopt),
              StatusIs(kInvalid, "mul got incompatible shardings for broadcasting"));
  EXPECT_THAT(SoftmaxRule(h), HasType("float32[8@fsdp,16,64@model]"));
  EXPECT_THAT(ActivationRule("silu", h), HasType("float32[8@fsdp,16,64@model]"));
}

TEST(ModelOpsTest, Embed) {  // flax spmd_test test_out_sharding_embed(_attend)
  Mesh mesh = TestMesh("mesh[X=2,Y=2]");
  ArrayType ids = Arr(mesh, {2, 4}, "P('X', None)", DType::kInt32);
  ArrayType table = Arr(mesh, {10, 4}, "P(None, 'Y')");
  EXPECT_THAT(EmbedRule(ids, table, std::nullopt), HasType("float32[2@X,4,4@Y]"));
  EXPECT_THAT(EmbedRule(ids, table, Spec("P('X', None, None)")), HasType("float32[2@X,4,4]"));
  EXPECT_THAT(EmbedRule(ids, Arr(mesh, {10, 4}, "P('Y', None)"), std::nullopt),
              StatusIs(kInvalid, "out_sharding"));
  EXPECT_THAT(EmbedRule(ids, Arr(mesh, {10, 4}, "P('Y', None)"), Spec("P('X')")),
              HasType("float32[2@X,4,4]"));
  EXPECT_THAT(EmbedAttendRule(Arr(mesh, {2, 4}, "P('X', None)"), Arr(mesh, {10, 4}, "P()"),
                              Spec("P('X', 'Y')")),
              HasType("float32[2@X,10@Y]"));
}

}  // namespace
}  // namespace meshserve
