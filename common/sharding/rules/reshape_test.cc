#include "common/sharding/rules/reshape.h"

#include <optional>
#include <string>
#include <vector>

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

struct ReshapeRow {
  const char* name;
  std::vector<int64_t> src;
  std::vector<int64_t> dst;
  const char* src_spec;
  const char* want;  // type string, or an error phrase when `error`
  bool error;
};

class ReshapeTableTest : public ::testing::TestWithParam<ReshapeRow> {};

// tests/pjit_test.py test_reshape_split_merge_one_axis (mesh x=2, y=2) and
// the design doc's examples.
TEST_P(ReshapeTableTest, MatchesJax) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  const ReshapeRow& row = GetParam();
  auto out = ReshapeRule(Arr(mesh, row.src, row.src_spec), row.dst, std::nullopt);
  if (row.error) {
    EXPECT_THAT(out, StatusIs(absl::StatusCode::kInvalidArgument, row.want));
  } else {
    EXPECT_THAT(out, HasType(row.want));
  }
}

INSTANTIATE_TEST_SUITE_P(
    SplitMergeOneAxis, ReshapeTableTest,
    ::testing::Values(
        ReshapeRow{"split_1", {4, 6, 8}, {4, 2, 3, 8}, "P('x', None, 'y')", "float32[4@x,2,3,8@y]", false},
        ReshapeRow{"split_2", {4, 6, 8}, {4, 6, 2, 2, 2}, "P('x', None, None)", "float32[4@x,6,2,2,2]", false},
        ReshapeRow{"split_3_error", {4, 6, 8}, {4, 2, 3, 4, 2}, "P('x', None, None)", "Splitting on more than 1 axis is not supported", true},
        ReshapeRow{"split_4", {4, 6, 8}, {4, 2, 3, 8}, "P('x', 'y', None)", "float32[4@x,2@y,3,8]", false},
        ReshapeRow{"split_4_xy", {4, 12, 8}, {4, 4, 3, 8}, "P(None, ('x', 'y'), None)", "float32[4,4@(x,y),3,8]", false},
        ReshapeRow{"split_4_error", {4, 6, 8}, {4, 3, 2, 8}, "P('x', 'y', None)", "This reshape is not supported", true},
        ReshapeRow{"split_5_error", {4, 6, 8}, {4, 4, 2, 6}, "P('x', None, None)", "This reshape is not supported", true},
        ReshapeRow{"split_6_error", {4, 8, 9}, {4, 2, 2, 3, 3, 2}, "P('x', None, None)", "This reshape is not supported", true},
        ReshapeRow{"split_7", {10, 1}, {2, 5, 1}, "P('x', None)", "float32[2@x,5,1]", false},
        ReshapeRow{"split_8", {10, 1}, {2, 5, 1, 1}, "P('x', None)", "float32[2@x,5,1,1]", false},
        ReshapeRow{"split_9", {10, 1, 1}, {2, 5, 1, 1}, "P('x', None, None)", "float32[2@x,5,1,1]", false},
        ReshapeRow{"split_10", {1, 10}, {1, 2, 5}, "P(None, 'x')", "float32[1,2@x,5]", false},
        ReshapeRow{"merge_1", {4, 2, 3, 8}, {4, 6, 8}, "P('x', None, None, 'y')", "float32[4@x,6,8@y]", false},
        ReshapeRow{"merge_2", {2, 2, 6, 8}, {4, 6, 8}, "P(None, None, 'y', 'x')", "float32[4,6@y,8@x]", false},
        ReshapeRow{"merge_3", {4, 6, 2, 2, 2}, {4, 6, 8}, "P('x', None, None, None, None)", "float32[4@x,6,8]", false},
        ReshapeRow{"merge_4", {4, 2, 3, 8}, {4, 6, 8}, "P(None, 'y', None, 'x')", "float32[4,6@y,8@x]", false},
        ReshapeRow{"merge_4_xy", {4, 4, 3, 8}, {4, 12, 8}, "P(None, ('x', 'y'), None, None)", "float32[4,12@(x,y),8]", false},
        ReshapeRow{"merge_4_error", {4, 2, 3, 2, 4}, {4, 6, 8}, "P('x', None, None, None, None)", "Merging on more than 1 axis is not supported", true},
        ReshapeRow{"merge_5_error", {4, 2, 6, 8}, {4, 12, 8}, "P(None, None, 'y', 'x')", "This reshape is not supported", true},
        ReshapeRow{"merge_6_error", {4, 2, 3, 8}, {4, 8, 6}, "P(None, 'y', None, 'x')", "This reshape is not supported", true},
        ReshapeRow{"merge_7", {2, 5, 1}, {10, 1}, "P('x', None, None)", "float32[10@x,1]", false},
        ReshapeRow{"doc_split_xy_2_4", {8}, {2, 4}, "P(('x', 'y'))", "float32[2@x,4@y]", false},
        ReshapeRow{"doc_split_xy_4_2", {8}, {4, 2}, "P(('x', 'y'))", "float32[4@(x,y),2]", false},
        ReshapeRow{"doc_merge_xy", {2, 4}, {8}, "P('x', 'y')", "float32[8@(x,y)]", false},
        ReshapeRow{"doc_merge_none_before_sharded", {2, 2, 2}, {8}, "P('x', None, 'y')", "This reshape is not supported", true},
        ReshapeRow{"replicated", {64, 1}, {2, 32, 1}, "P(None, None)", "float32[2,32,1]", false},
        ReshapeRow{"singleton_dims", {16, 1}, {1, 16, 1}, "P('x', None)", "float32[1,16@x,1]", false},
        ReshapeRow{"singleton_dims_2", {1, 4, 1, 6, 1}, {1, 4, 6}, "P(None, 'x', None, None, None)", "float32[1,4@x,6]", false},
        ReshapeRow{"trailing_ones", {1024, 4096}, {1024, 2048, 2, 1, 1, 1, 1}, "P('x', None)", "float32[1024@x,2048,2,1,1,1,1]", false},
        ReshapeRow{"merge_trailing_ones", {1024, 2048, 2, 1, 1, 1}, {1024, 4096}, "P(None, 'x', None, None, None, None)", "float32[1024,4096@x]", false}),
    [](const ::testing::TestParamInfo<ReshapeRow>& info) { return std::string(info.param.name); });

TEST(ReshapeRuleTest, OutShardingOverrides) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8, 1}, "P('x', None)"), {1, 4, 2}, SpecOrDie("P(None, None, 'x')")),
              HasType("float32[1,4,2@x]"));
}

TEST(ReshapeRuleTest, ErrorNamesOperandAndSizes) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {2, 2, 2}, "P('x', None, 'y')"), {8}, std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Got operand type: f32[2@x,2,2@y], new sizes: (8,)"));
}

TEST(ReshapeRuleTest, TotalSizeMustBeUnchanged) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8}, "P('x')"), {3, 3}, std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument, "total size must be unchanged"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8}, "P('x')"), {-2, -4}, std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument, "non-negative"));
}

// jax/_src/lax/lax.py reshape(): a permutation in `dimensions` reaches
// _split_an_axis_sharding_rule / _merge_an_axis_sharding_rule, which refuse a
// sharded dim; the identity permutation is dropped (`same_dims`) first.
TEST(ReshapeRuleTest, DimensionsPermutationWithShardedSplitIsAnError) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {4, 2}, "P('x', None)"), {2, 2, 2}, std::nullopt,
                          std::vector<int64_t>{1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "This reshape is not supported"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {2, 4}, "P('x', None)"), {8}, std::nullopt,
                          std::vector<int64_t>{1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "This reshape is not supported"));
}

TEST(ReshapeRuleTest, IdentityDimensionsAreDroppedAsInLaxReshape) {
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8}, "P('x')"), {2, 4}, std::nullopt,
                          std::vector<int64_t>{0}),
              HasType("float32[2@x,4]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {4, 2}, "P('x', None)"), {8}, std::nullopt,
                          std::vector<int64_t>{0, 1}),
              HasType("float32[8@x]"));
}

// Each branch of jax/_src/lax/lax.py _reshape_sharding_rule, with size-1 dims
// (tests/pjit_test.py test_reshape, mesh x=2).
TEST(ReshapeRuleTest, SingletonDimsOnly) {  // _split_merge_singleton_dim_sharding_rule
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {16, 1}, "P('x', None)"), {1, 16, 1}, std::nullopt),
              HasType("float32[1,16@x,1]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {1, 4, 1, 6, 1}, "P(None, 'x')"), {1, 4, 6}, std::nullopt),
              HasType("float32[1,4@x,6]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8, 32}, "P(None, 'x')"), {8, 1, 1, 32}, std::nullopt),
              HasType("float32[8,1,1,32@x]"));
}

TEST(ReshapeRuleTest, SplitWithSingletons) {  // _split_on_one_axis strips the 1s first
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8, 32}, "P('x', None)"), {8, 16, 2, 1, 1, 1, 1},
                          std::nullopt),
              HasType("float32[8@x,16,2,1,1,1,1]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {4, 1, 8, 1, 32}, "P('x')"), {4, 1, 2, 4, 1, 32},
                          std::nullopt),
              HasType("float32[4@x,1,2,4,1,32]"));
  // A split dim's pieces are found across a 1 the operand does not have.
  EXPECT_THAT(ReshapeRule(Arr(mesh, {4, 1}, "P('x', None)"), {1, 2, 2}, std::nullopt),
              HasType("float32[1,2@x,2]"));
  Mesh xy = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(ReshapeRule(Arr(xy, {16, 32, 1}, "P('x', 'y', None)"), {16, 8, 4}, std::nullopt),
              HasType("float32[16@x,8@y,4]"));
}

TEST(ReshapeRuleTest, MergeWithSingletons) {  // _merge_on_one_axis
  Mesh mesh = MeshOrDie("mesh[x=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8, 16, 2, 1, 1, 1}, "P(None, 'x')"), {8, 32}, std::nullopt),
              HasType("float32[8,32@x]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {4, 1, 2, 4, 1, 32}, "P('x')"), {4, 1, 8, 1, 32},
                          std::nullopt),
              HasType("float32[4@x,1,8,1,32]"));
  Mesh xy = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(ReshapeRule(Arr(xy, {16, 8, 4}, "P('x', 'y', None)"), {16, 32, 1}, std::nullopt),
              HasType("float32[16@x,32@y,1]"));
}

// A size-1 dim at the same position in both shapes keeps its entry (an axis
// of size 1): test_reshape_preserve_singleton_dim_spec, mesh x=1, y=2.
TEST(ReshapeRuleTest, SingletonDimKeepsItsSpec) {
  Mesh mesh = MeshOrDie("mesh[x=1,y=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {1, 512}, "P('x', 'y')"), {1, 4, 128}, std::nullopt),
              HasType("float32[1@x,4@y,128]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {1, 4, 128}, "P('x', 'y', None)"), {1, 512}, std::nullopt),
              HasType("float32[1@x,512@y]"));
}

TEST(ReshapeRuleTest, MultiAxisSplitAndMerge) {  // split_partitions
  Mesh mesh = MeshOrDie("mesh[x=2,y=2,z=2]");
  EXPECT_THAT(ReshapeRule(Arr(mesh, {8}, "P(('x', 'y', 'z'))"), {2, 4}, std::nullopt),
              HasType("float32[2@x,4@(y,z)]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {16}, "P(('x', 'y', 'z'))"), {2, 2, 2, 2}, std::nullopt),
              HasType("float32[2@x,2@y,2@z,2]"));
  EXPECT_THAT(ReshapeRule(Arr(mesh, {2, 2, 2, 2}, "P('x', 'y', 'z', None)"), {16}, std::nullopt),
              HasType("float32[16@(x,y,z)]"));
  Mesh xy = MeshOrDie("mesh[x=2,y=2]");
  EXPECT_THAT(ReshapeRule(Arr(xy, {12}, "P(('x', 'y'))"), {3, 4}, std::nullopt),
              StatusIs(kInvalid, "This reshape is not supported"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
