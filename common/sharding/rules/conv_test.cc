#include "common/sharding/rules/conv.h"

#include <optional>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(ConvRuleTest, SpatialShardingFollowsTheInput) {  // test_conv_general_dilated
  Mesh mesh = MeshOrDie("mesh[x=4,y=2]");
  ConvParams p;
  p.lhs_spec = "NWC";
  p.rhs_spec = "WIO";
  p.out_spec = "NWC";
  p.window_strides = {1};
  p.padding = "SAME";
  // An NWC input f32[16,128,8] with `spec` against a WIO kernel [w,8,10].
  auto conv = [&](const char* spec, int64_t w, const char* kernel_spec) {
    return ConvGeneralDilatedRule(Arr(mesh, {16, 128, 8}, spec), Arr(mesh, {w, 8, 10}, kernel_spec),
                                  p, std::nullopt);
  };
  EXPECT_THAT(conv("P('x', 'y')", 5, "P()"), HasType("float32[16@x,128@y,10]"));
  EXPECT_THAT(conv("P('x', None, 'y')", 5, "P()"),
              StatusIs(kInvalid, "Please specify the output sharding via `out_sharding` "
                                 "parameter of `conv_general_dilated`"));
  EXPECT_THAT(conv("P('x')", 5, "P(None, None, 'y')"), StatusIs(kInvalid, "out_sharding"));
  p.padding = "VALID";
  EXPECT_THAT(conv("P('x', 'y')", 5, "P()"), HasType("float32[16@x,124@y,10]"));
  EXPECT_THAT(conv("P('x', 'y')", 4, "P()"),
              StatusIs(kInvalid, "conv_general_dilated on sharded dims where out dim (125)"));
}

TEST(ConvRuleTest, NnxConvOutSharding) {  // flax spmd_test test_out_sharding_conv
  Mesh mesh = MeshOrDie("mesh[X=2,Y=2]");
  ConvParams p{"NWC", "WIO", "NWC", {1}, "SAME", {}, {}, {}, 1, 1};
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {2, 4, 4}, "P('X', None, None)"),
                                     Arr(mesh, {3, 4, 8}, "P()"), p, SpecOrDie("P('X', 'Y', None)")),
              HasType("float32[2@X,4@Y,8]"));
  EXPECT_THAT(ConvGeneralDilatedRule(Arr(mesh, {2, 4, 4}, "P('X', None, None)"),
                                     Arr(mesh, {3, 4, 8}, "P()"), p, std::nullopt),
              HasType("float32[2@X,4,8]"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
