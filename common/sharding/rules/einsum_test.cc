#include "common/sharding/rules/einsum.h"

#include <optional>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(EinsumRuleTest, SwiGluGate) {
  Mesh mesh = MeshOrDie("mesh[fsdp=2,model=4]");
  EXPECT_THAT(EinsumRule("btd,df->btf", Arr(mesh, {8, 4096, 2048}, "P('fsdp', None, None)"),
                         Arr(mesh, {2048, 8192}, "P('fsdp', 'model')"), std::nullopt),
              HasType("float32[8@fsdp,4096,8192@model]"));
}

TEST(EinsumRuleTest, InverseNeedsOutSharding) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType x = Arr(mesh, {8, 4, 2}, "P('x', 'y', None)");
  ArrayType y = Arr(mesh, {2, 4, 8}, "P(None, 'x', 'y')");
  EXPECT_THAT(EinsumRule("btd,dhq->bhtq", x, y, std::nullopt),
              StatusIs(kInvalid, "produces an illegally sharded result"));
  EXPECT_THAT(EinsumRule("btd,dhq->bhtq", x, y, SpecOrDie("P('x', None, 'y', None)")),
              HasType("float32[8@x,4,4@y,8]"));
}

TEST(EinsumRuleTest, BatchAndUnreducedErrors) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2,z=1]");
  EXPECT_THAT(EinsumRule("abc,acz->abz", Arr(mesh, {8, 4, 2}, "P('x', 'y', 'z')"),
                         Arr(mesh, {8, 2, 4}, "P('y', 'z', 'x')"), std::nullopt),
              StatusIs(kInvalid, "batch dimensions"));
  EXPECT_THAT(EinsumRule("xy,yz->xz", Arr(mesh, {8, 2}, "P('x', 'y')"),
                         Arr(mesh, {2, 8}, "P('y', None)"), SpecOrDie("P('x', unreduced={'z'})")),
              StatusIs(kInvalid, "unreduced axes should be equal to the contracting specs"));
  EXPECT_THAT(EinsumRule("xy,yz->xz", Arr(mesh, {8, 2}, "P('x', 'y')"),
                         Arr(mesh, {2, 8}, "P('y', None)"), SpecOrDie("P('x', unreduced={'y'})")),
              HasType("float32[8@x,8]{U:y}"));
}

TEST(EinsumRuleTest, SummedLabelsDropTheirSharding) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  // 'k' only in lhs and not in the output: summed away first.
  EXPECT_THAT(EinsumRule("ik,ij->j", Arr(mesh, {4, 6}, "P('x', 'y')"),
                         Arr(mesh, {4, 8}, "P(None, 'x')"), std::nullopt),
              HasType("float32[8@x]"));
  // Implicit output: labels used once, sorted.
  EXPECT_THAT(EinsumRule("ij,jk", Arr(mesh, {4, 6}, "P('x', None)"),
                         Arr(mesh, {6, 8}, "P(None, 'y')"), std::nullopt),
              HasType("float32[4@x,8@y]"));
}

TEST(EinsumRuleTest, MalformedEquations) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  ArrayType a = Arr(mesh, {4, 6}, "P()");
  // Was "two operands" while only two-operand equations were supported.
  EXPECT_THAT(EinsumRule("ij->i", a, a, std::nullopt),
              StatusIs(kInvalid, "Number of einsum subscripts must be equal to the number of "
                                 "operands"));
  EXPECT_THAT(EinsumRule("i1,jk->ik", a, a, std::nullopt), StatusIs(kInvalid, "'1'"));
  EXPECT_THAT(EinsumRule("ij,jk->iz", a, a, std::nullopt), StatusIs(kInvalid, "'z'"));
  // Repeated labels are supported now; 'ii' needs a square operand.
  EXPECT_THAT(EinsumRule("ii,jk->k", a, a, std::nullopt), StatusIs(kInvalid, "sizes"));
  EXPECT_THAT(EinsumRule("ij,jk->ik", a, a, std::nullopt), StatusIs(kInvalid, "sizes"));
}

// The parser keeps the compiler's two-operand grammar (dot_strategy.cc).
TEST(EinsumRuleTest, TwoOperandParserIsUnchanged) {
  EXPECT_THAT(ParseEinsumEquation("ij,jk->ik").status(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(ParseEinsumEquation("...ij,jk->...ik").status(),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(ParseEinsumEquation("ii,jk->k").status(),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(ParseEinsumEquation("ij,jk,kl->il").status(), StatusIs(kInvalid, "two operands"));
  absl::StatusOr<EinsumEquation> e = ParseEinsumEquation("ij, jk");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->out, "ik");
  EXPECT_FALSE(e->explicit_output);
}

// opt_einsum's parser: "..." takes the last of the first max(rank) unused
// letters, right-aligned per operand.
TEST(EinsumRuleTest, EllipsisExpansion) {
  const int ranks[] = {3, 2};
  absl::StatusOr<EinsumSubscripts> s = ParseEinsumSubscripts("...ij,jk->...ik", ranks);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->inputs[0], "cij");
  EXPECT_EQ(s->inputs[1], "jk");
  EXPECT_EQ(s->out, "cik");
  const int ranks2[] = {3, 2};
  s = ParseEinsumSubscripts("...j,...j", ranks2);  // implicit: ellipsis labels first
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->inputs[0], "bcj");
  EXPECT_EQ(s->inputs[1], "cj");
  EXPECT_EQ(s->out, "bc");
  const int ranks3[] = {1};
  EXPECT_THAT(ParseEinsumSubscripts("...ij->i", ranks3).status(),
              StatusIs(kInvalid, "Ellipses lengths do not match"));
  EXPECT_THAT(ParseEinsumSubscripts("i.j->i", ranks3).status(),
              StatusIs(kInvalid, "Invalid Ellipses"));
}

// jax/_src/numpy/einsum.py: the ellipsis labels are batch or free labels of
// the one dot_general.
TEST(EinsumRuleTest, EllipsisFollowsDotGeneral) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const ArrayType ops[] = {Arr(mesh, {8, 4, 6}, "P('x', None, None)"),
                           Arr(mesh, {6, 2}, "P(None, 'y')")};
  EXPECT_THAT(EinsumRule("...ij,jk->...ik", ops, std::nullopt),
              HasType("float32[8@x,4,2@y]"));
  // filter_singleton_dims: the rhs's size-1 ellipsis dim is squeezed.
  const ArrayType b[] = {Arr(mesh, {8, 4, 6}, "P('x', None, None)"),
                         Arr(mesh, {1, 6, 2}, "P(None, None, 'y')")};
  EXPECT_THAT(EinsumRule("...ij,...jk->...ik", b, std::nullopt),
              HasType("float32[8@x,4,2@y]"));
}

// sum_repeats: select(lax._delta(...), x, 0) then reduce_sum; the delta is
// unsharded, so only a replicated operand passes _select_sharding_rule.
TEST(EinsumRuleTest, RepeatedLabels) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const ArrayType trace[] = {Arr(mesh, {4, 4}, "P()")};
  EXPECT_THAT(EinsumRule("ii->", trace, std::nullopt), HasType("float32[]"));
  const ArrayType diag[] = {Arr(mesh, {4, 4, 8}, "P()")};
  EXPECT_THAT(EinsumRule("iij->ij", diag, std::nullopt), HasType("float32[4,8]"));
  const ArrayType sharded[] = {Arr(mesh, {4, 4, 8}, "P(None, None, 'x')")};
  EXPECT_THAT(EinsumRule("iij->j", sharded, std::nullopt),
              StatusIs(kInvalid, "select `which` must be scalar or have the same sharding"));
  // In a pair: the repeated label of the lhs is reduced to one dim first.
  const ArrayType pair[] = {Arr(mesh, {4, 4}, "P()"), Arr(mesh, {4, 8}, "P(None, 'y')")};
  EXPECT_THAT(EinsumRule("ii,ij->j", pair, std::nullopt), HasType("float32[8@y]"));
}

// One operand: reductions drop the summed labels' axes; a transpose keeps all.
TEST(EinsumRuleTest, OneOperand) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const ArrayType x[] = {Arr(mesh, {8, 4}, "P('x', 'y')")};
  EXPECT_THAT(EinsumRule("ij->ji", x, std::nullopt), HasType("float32[4@y,8@x]"));
  EXPECT_THAT(EinsumRule("ij->i", x, std::nullopt), HasType("float32[8@x]"));
  EXPECT_THAT(EinsumRule("ij", x, std::nullopt), HasType("float32[8@x,4@y]"));
}

// Three operands: opt_einsum's optimal path, each step its own dot_general.
TEST(EinsumRuleTest, ThreeOperandsFollowThePath) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const ArrayType chain[] = {Arr(mesh, {8, 4}, "P('x', None)"), Arr(mesh, {4, 16}, "P()"),
                             Arr(mesh, {16, 2}, "P(None, 'y')")};
  EXPECT_THAT(EinsumRule("ab,bc,cd->ad", chain, std::nullopt), HasType("float32[8@x,2@y]"));
  const ArrayType bad[] = {Arr(mesh, {8, 4}, "P('x', None)"), Arr(mesh, {4, 16}, "P(None, 'y')"),
                           Arr(mesh, {16, 2}, "P('y', None)")};
  EXPECT_THAT(EinsumRule("ab,bc,cd->ad", bad, std::nullopt),
              StatusIs(kInvalid, "Contracting dimensions are sharded"));
}

// tests/pjit_test.py test_intermediate_einsum*, test_three_operand_einsum_unreduced:
// with out_sharding and several steps the einsum runs under auto_axes.
TEST(EinsumRuleTest, ThreeOperandsWithOutShardingRunUnderAutoAxes) {
  Mesh mesh = MeshOrDie("mesh[data=4]");
  const ArrayType ops[] = {Arr(mesh, {8, 32, 1, 16}, "P(None, None, None, 'data')"),
                           Arr(mesh, {8, 32, 1, 16}, "P('data')"),
                           Arr(mesh, {8, 32, 1, 8}, "P('data')")};
  EXPECT_THAT(EinsumRule("bthD, bthi, bthj->ijD", ops, SpecOrDie("P('data', None, None)")),
              HasType("float32[16@data,8,16]"));
  Mesh xy = MeshOrDie("mesh[x=2,y=2]");
  const ArrayType u[] = {Arr(xy, {2}, "P('x')"), Arr(xy, {2, 4}, "P('x', 'y')"),
                         Arr(xy, {2}, "P('x')")};
  EXPECT_THAT(EinsumRule("d,dh,d->h", u, SpecOrDie("P('y', unreduced={'x'})")),
              HasType("float32[4@y]{U:x}"));
  const ArrayType five[] = {Arr(xy, {2}, "P()"), Arr(xy, {2}, "P()"), Arr(xy, {2}, "P()"),
                            Arr(xy, {2}, "P()"), Arr(xy, {2}, "P()")};
  EXPECT_THAT(EinsumRule("a,a,a,a,a->a", five, std::nullopt),
              StatusIs(absl::StatusCode::kUnimplemented));
}

// opt_einsum's optimal path picks the pair order by cost, and the order
// decides which dot_general rules run (the sizes below flip it).
TEST(EinsumRuleTest, PathOrderFollowsTheCost) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  const ArrayType cheap_bc_cd[] = {Arr(mesh, {8, 4}, "P('x', None)"),
                                   Arr(mesh, {4, 16}, "P(None, 'x')"), Arr(mesh, {16, 2}, "P()")};
  EXPECT_THAT(EinsumRule("ab,bc,cd->ad", cheap_bc_cd, std::nullopt), HasType("float32[8@x,2]"));
  const ArrayType cheap_ab_bc[] = {Arr(mesh, {2, 4}, "P('x', None)"),
                                   Arr(mesh, {4, 16}, "P(None, 'x')"), Arr(mesh, {16, 64}, "P()")};
  EXPECT_THAT(EinsumRule("ab,bc,cd->ad", cheap_ab_bc, std::nullopt),
              StatusIs(kInvalid, "produces an illegally sharded result"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
