#include "common/sharding/rules/gather.h"

#include <optional>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

// tests/pjit_test.py ShardingInTypesTest.test_gather_sharding_rule:
// embed_vd.at[:, token_bt].get() with embed P('x', None) and tokens P().
TEST(TakeRuleTest, FullSliceDimKeepsItsSharding) {
  const ArrayType embed = Arr(MeshOrDie("mesh[x=2,y=2]"), {64, 16}, "P('x', None)");
  const Mesh& mesh = embed.sharding.mesh();
  ArrayType tok = Arr(mesh, {8, 4}, "P()", DType::kInt32);
  EXPECT_THAT(TakeRule(embed, tok, 1), HasType("float32[64@x,8,4]"));
  // axis=0 slices the sharded dim: _gather_spec_computation returns None.
  EXPECT_THAT(TakeRule(embed, tok, 0),
              StatusIs(kInvalid, "Use `.at[...].get(out_sharding=)` to provide output "
                                 "PartitionSpec for the gather indexing"));
}

// test_auto_gather_out_sharding: sharded indices need out_sharding, which
// runs the gather under auto_axes.
TEST(TakeRuleTest, ShardedIndicesNeedOutSharding) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType embed = Arr(mesh, {64, 16}, "P(None, 'x')");
  ArrayType tok = Arr(mesh, {8, 4}, "P('x', None)", DType::kInt32);
  EXPECT_THAT(TakeRule(embed, tok, 0), StatusIs(kInvalid, "would require collectives"));
  EXPECT_THAT(TakeRule(embed, tok, 0, SpecOrDie("P('x', None, None)")),
              HasType("float32[8@x,4,16]"));
  EXPECT_THAT(TakeRule(embed, tok, 0, SpecOrDie("P('q')")), StatusIs(kInvalid, "q"));
}

// jax/_src/numpy/indexing.py _take: axis=None ravels (a reshape) first, an
// empty axis with indices is an error, a negative axis counts from the end.
TEST(TakeRuleTest, AxisHandling) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  ArrayType idx = Arr(mesh, {3}, "P()", DType::kInt32);
  EXPECT_THAT(TakeRule(Arr(mesh, {8, 4}, "P()"), idx, std::nullopt), HasType("float32[3]"));
  EXPECT_THAT(TakeRule(Arr(mesh, {8, 4}, "P('x', None)"), idx, -1),
              HasType("float32[8@x,3]"));
  EXPECT_THAT(TakeRule(Arr(mesh, {8, 0}, "P()"), idx, 1),
              StatusIs(kInvalid, "Cannot do a non-empty jnp.take() from an empty axis."));
  EXPECT_THAT(TakeRule(Arr(mesh, {8, 4}, "P()"), idx, 2), StatusIs(kInvalid, "out of bounds"));
  EXPECT_THAT(TakeRule(Arr(mesh, {8, 4}, "P()"), Arr(mesh, {3}, "P()"), 0),
              StatusIs(kInvalid, "integer"));
}

// test_gather_sharding_rule (vmapped x[y]): batching dims resolve into the
// indices' spec; test_gather_with_full_slice_in_index_start_map.
TEST(GatherRuleTest, BatchingDims) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  GatherDimensionNumbers d{{}, {1}, {1}, {0}, {0}};
  EXPECT_THAT(GatherRule(Arr(mesh, {64, 16}, "P('x', None)"),
                         Arr(mesh, {64, 4, 1}, "P('x', None, None)", DType::kInt32), d, {1, 1}),
              HasType("float32[64@x,4]"));
  EXPECT_THAT(GatherRule(Arr(mesh, {64, 16}, "P('x', None)"),
                         Arr(mesh, {64, 4, 1}, "P()", DType::kInt32), d, {1, 1}),
              HasType("float32[64@x,4]"));
  EXPECT_THAT(GatherRule(Arr(mesh, {64, 16}, "P('x', None)"),
                         Arr(mesh, {64, 4, 1}, "P('y', None, None)", DType::kInt32), d, {1, 1}),
              StatusIs(kInvalid, "could not be resolved unambiguously"));
  GatherDimensionNumbers full{{1, 2}, {}, {1, 2}, {0}, {0}};
  EXPECT_THAT(GatherRule(Arr(mesh, {2, 4, 4}, "P('x', 'y', None)"),
                         Arr(mesh, {2, 2}, "P('x', None)", DType::kInt32), full, {1, 4, 1}),
              HasType("float32[2@x,4@y,1]"));
}

// _gather_shape_rule's checks.
TEST(GatherRuleTest, ShapeChecks) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  ArrayType a = Arr(mesh, {8, 4}, "P()");
  ArrayType i = Arr(mesh, {3, 1}, "P()", DType::kInt32);
  EXPECT_THAT(GatherRule(a, i, GatherDimensionNumbers{{1}, {0}, {0, 1}, {}, {}}, {1, 4}),
              StatusIs(kInvalid, "start_index_map"));
  EXPECT_THAT(GatherRule(a, i, GatherDimensionNumbers{{1}, {0}, {0}, {}, {}}, {2, 4}),
              StatusIs(kInvalid, "Slice size at index 0"));
  EXPECT_THAT(GatherRule(a, i, GatherDimensionNumbers{{1}, {0}, {0}, {}, {}}, {1, 4}),
              HasType("float32[3,4]"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
