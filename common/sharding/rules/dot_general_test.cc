#include "common/sharding/rules/dot_general.h"

#include <optional>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

// tests/pjit_test.py ShardingInTypesTest.test_dot_general / _error: mesh x=2,
// y=2, f32[8,2] @ f32[2,8].
struct DotRow {
  const char* lhs;
  const char* rhs;
  const char* want;  // type string, or an error phrase when `error`
  bool error;
};

class DotGeneralTableTest : public ::testing::TestWithParam<DotRow> {};

TEST_P(DotGeneralTableTest, MatchesJax) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const DotRow& row = GetParam();
  auto out = DotGeneralRule(Arr(mesh, {8, 2}, row.lhs), Arr(mesh, {2, 8}, row.rhs), Matmul(),
                            std::nullopt);
  if (row.error) {
    EXPECT_THAT(out, StatusIs(kInvalid, row.want));
  } else {
    EXPECT_THAT(out, HasType(row.want));
  }
}

INSTANTIATE_TEST_SUITE_P(
    DesignDocTable, DotGeneralTableTest,
    ::testing::Values(
        DotRow{"P('x', None)", "P(None, 'y')", "float32[8@x,8@y]", false},
        DotRow{"P('x', None)", "P(None, None)", "float32[8@x,8]", false},
        DotRow{"P('x', 'y')", "P(None, None)", "float32[8@x,8]", false},
        DotRow{"P('x', None)", "P('x', None)", "float32[8@x,8]", false},
        DotRow{"P(None, 'y')", "P(None, 'y')", "float32[8,8@y]", false},
        DotRow{"P('x', None)", "P(None, 'x')", "produces an illegally sharded result", true},
        DotRow{"P('x', 'y')", "P('x', 'y')", "Contracting dimensions are sharded", true},
        DotRow{"P('x', 'y')", "P('y', None)", "Contracting dimensions are sharded", true},
        DotRow{"P(None, 'y')", "P('y', None)", "Contracting dimensions are sharded", true}));

TEST(DotGeneralRuleTest, IllegalResultMessageShowsShortTypes) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  auto out = DotGeneralRule(Arr(mesh, {8, 2}, "P('x', None)"), Arr(mesh, {2, 8}, "P(None, 'x')"),
                            Matmul(), std::nullopt);
  EXPECT_THAT(out, StatusIs(kInvalid, "dot_general operation with inputs: f32[8@x,2], "
                                      "f32[2,8@x] produces an illegally sharded result: "
                                      "f32[8@x,8@x]"));
}

TEST(DotGeneralRuleTest, BatchDimsMustMatch) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2,z=1]");
  DotDimensionNumbers dims{{2}, {1}, {0}, {0}};
  auto out = DotGeneralRule(Arr(mesh, {8, 4, 2}, "P('x', 'y', 'z')"),
                            Arr(mesh, {8, 2, 4}, "P('y', 'z', 'x')"), dims, std::nullopt);
  EXPECT_THAT(out, StatusIs(kInvalid, "dot_general requires lhs batch dimensions and rhs batch "
                                      "dimensions to have the same sharding, got ('x',) and "
                                      "('y',)."));
  auto ok = DotGeneralRule(Arr(mesh, {8, 4, 2}, "P('x', 'y', None)"),
                           Arr(mesh, {8, 2, 4}, "P('x', None, None)"), dims, std::nullopt);
  EXPECT_THAT(ok, HasType("float32[8@x,4@y,4]"));
}

TEST(DotGeneralRuleTest, RulesAreSkippedWithoutExplicitAxes) {
  Mesh mesh = MeshOrDie("mesh[x=2:Auto,y=2:Auto]");
  EXPECT_THAT(DotGeneralRule(Arr(mesh, {8, 2}, "P('x', 'y')"), Arr(mesh, {2, 8}, "P('y', 'x')"),
                             Matmul(), std::nullopt),
              HasType("float32[8,8]"));
}

TEST(DotGeneralRuleTest, OutShardingMayNotNameAutoAxes) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2:Auto]");
  EXPECT_THAT(DotGeneralRule(Arr(mesh, {8, 2}, "P('x', None)"), Arr(mesh, {2, 8}, "P()"),
                             Matmul(), SpecOrDie("P('y', None)")),
              StatusIs(kInvalid, "cannot contain axis names that are of type Auto or Manual"));
}

TEST(DotGeneralRuleTest, OutShardingMustDivide) {
  Mesh mesh = MeshOrDie("mesh[x=4]");
  EXPECT_THAT(DotGeneralRule(Arr(mesh, {6, 2}, "P()"), Arr(mesh, {2, 8}, "P()"), Matmul(),
                             SpecOrDie("P('x', None)")),
              StatusIs(kInvalid, "does not evenly divide the dimension size"));
}

TEST(DotGeneralRuleTest, BadDimensionNumbersAreRejected) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(DotGeneralRule(Arr(mesh, {8, 2}, "P()"), Arr(mesh, {2, 8}, "P()"),
                             DotDimensionNumbers{{5}, {0}, {}, {}}, std::nullopt),
              StatusIs(kInvalid, "(5,)"));
  EXPECT_THAT(DotGeneralRule(Arr(mesh, {8, 3}, "P()"), Arr(mesh, {2, 8}, "P()"), Matmul(),
                             std::nullopt),
              StatusIs(kInvalid, "same shape"));
}

// Seed discussion: SwiGLU FSDP+TP, mesh fsdp=2, model=4, bfloat16.
class SwiGluTest : public ::testing::Test {
 protected:
  DotDimensionNumbers Proj() { return DotDimensionNumbers{{2}, {0}, {}, {}}; }
  Mesh mesh_ = MeshOrDie("mesh[fsdp=2,model=4]");
  ArrayType x_ = Arr(mesh_, {8, 4096, 2048}, "P('fsdp', None, None)", DType::kBFloat16);
  ArrayType w_gate_ = Arr(mesh_, {2048, 8192}, "P('fsdp', 'model')", DType::kBFloat16);
  ArrayType h_ = Arr(mesh_, {8, 4096, 8192}, "P('fsdp', None, 'model')", DType::kBFloat16);
  ArrayType w_down_ = Arr(mesh_, {8192, 2048}, "P('model', 'fsdp')", DType::kBFloat16);
};

TEST_F(SwiGluTest, GateProjectionDropsTheFsdpContraction) {
  EXPECT_THAT(DotGeneralRule(x_, w_gate_, Proj(), std::nullopt),
              HasType("bfloat16[8@fsdp,4096,8192@model]"));
}

TEST_F(SwiGluTest, DownProjectionIsAmbiguous) {
  EXPECT_THAT(DotGeneralRule(h_, w_down_, Proj(), std::nullopt),
              StatusIs(kInvalid, "Contracting dimensions are sharded and it is ambiguous how "
                                 "the output should be sharded. Please specify the output "
                                 "sharding via the `out_sharding` parameter."));
}

TEST_F(SwiGluTest, DownProjectionOutShardingChoices) {
  EXPECT_THAT(DotGeneralRule(h_, w_down_, Proj(), SpecOrDie("P('fsdp', None, None)")),
              HasType("bfloat16[8@fsdp,4096,2048]"));
  EXPECT_THAT(DotGeneralRule(h_, w_down_, Proj(), SpecOrDie("P('fsdp', None, 'model')")),
              HasType("bfloat16[8@fsdp,4096,2048@model]"));
  EXPECT_THAT(DotGeneralRule(h_, w_down_, Proj(), SpecOrDie("P('fsdp', None, None, unreduced={'model'})")),
              HasType("bfloat16[8@fsdp,4096,2048]{U:model}"));
}

TEST_F(SwiGluTest, UnreducedMustEqualTheContractingAxes) {
  ArrayType w = Arr(mesh_, {8192, 2048}, "P('model', None)", DType::kBFloat16);
  EXPECT_THAT(DotGeneralRule(h_, w, Proj(), SpecOrDie("P('fsdp', unreduced={'fsdp'})")),
              StatusIs(kInvalid, "disjoint"));
  ArrayType w2 = Arr(mesh_, {8192, 2048}, "P(None, None)", DType::kBFloat16);
  EXPECT_THAT(DotGeneralRule(h_, w2, Proj(), SpecOrDie("P('fsdp', unreduced={'model'})")),
              StatusIs(kInvalid, "lhs and rhs contracting dims should be sharded identically"));
  ArrayType h = Arr(mesh_, {8, 4096, 8192}, "P(None, None, 'model')", DType::kBFloat16);
  EXPECT_THAT(DotGeneralRule(h, w, Proj(), SpecOrDie("P(None, unreduced={'fsdp'})")),
              StatusIs(kInvalid, "unreduced axes should be equal to the contracting specs"));
}

TEST_F(SwiGluTest, OtherKernelSpecRepeatsFsdp) {
  ArrayType w = Arr(mesh_, {8192, 2048}, "P(None, 'fsdp')", DType::kBFloat16);
  EXPECT_THAT(DotGeneralRule(h_, w, Proj(), std::nullopt),
              StatusIs(kInvalid, "produces an illegally sharded result"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
