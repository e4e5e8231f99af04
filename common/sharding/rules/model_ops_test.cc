#include "common/sharding/rules/model_ops.h"

#include <optional>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(ModelOpsTest, LinearFollowsNnx) {  // flax spmd_test test_out_sharding_linear_layers
  Mesh mesh = MeshOrDie("mesh[X=2,Y=2]");
  ArrayType x = Arr(mesh, {2, 2}, "P('X', None)");
  ArrayType w = Arr(mesh, {2, 4}, "P()");
  ArrayType b = Arr(mesh, {4}, "P()");
  EXPECT_THAT(LinearRule(x, w, b, std::nullopt), HasType("float32[2@X,4]"));
  EXPECT_THAT(LinearRule(x, w, b, SpecOrDie("P('X', 'Y')")), HasType("float32[2@X,4@Y]"));
  EXPECT_THAT(LinearRule(x, w, Arr(mesh, {4}, "P('X')"), std::nullopt),
              StatusIs(kInvalid, "produces an illegally sharded result"));
  EXPECT_THAT(LinearRule(x, w, Arr(mesh, {3}, "P()"), std::nullopt), StatusIs(kInvalid, "bias"));
}

TEST(ModelOpsTest, NormsSoftmaxActivationsKeepTheInput) {
  Mesh mesh = MeshOrDie("mesh[fsdp=2,model=4]");
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
  Mesh mesh = MeshOrDie("mesh[X=2,Y=2]");
  ArrayType ids = Arr(mesh, {2, 4}, "P('X', None)", DType::kInt32);
  ArrayType table = Arr(mesh, {10, 4}, "P(None, 'Y')");
  EXPECT_THAT(EmbedRule(ids, table, std::nullopt), HasType("float32[2@X,4,4@Y]"));
  EXPECT_THAT(EmbedRule(ids, table, SpecOrDie("P('X', None, None)")), HasType("float32[2@X,4,4]"));
  EXPECT_THAT(EmbedRule(ids, Arr(mesh, {10, 4}, "P('Y', None)"), std::nullopt),
              StatusIs(kInvalid, "out_sharding"));
  EXPECT_THAT(EmbedRule(ids, Arr(mesh, {10, 4}, "P('Y', None)"), SpecOrDie("P('X')")),
              HasType("float32[2@X,4,4]"));
  EXPECT_THAT(EmbedAttendRule(Arr(mesh, {2, 4}, "P('X', None)"), Arr(mesh, {10, 4}, "P()"),
                              SpecOrDie("P('X', 'Y')")),
              HasType("float32[2@X,10@Y]"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
