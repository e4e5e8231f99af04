#include "common/sharding/rules/decode_ops.h"

#include "common/sharding/rules/rules_testing.h"

namespace meshserve {
namespace rules_testing {
namespace {

TEST(AttentionRuleTest, HeadsShardedAlikeKeepTheQueryType) {
  Mesh mesh = MeshOrDie("mesh[data=2,model=4]");
  ArrayType q = Arr(mesh, {8, 16, 12, 64}, "P('data', None, 'model', None)");
  ArrayType kv = Arr(mesh, {8, 16, 4, 64}, "P('data', None, 'model', None)");
  EXPECT_THAT(AttentionRule(q, kv, kv), HasType("float32[8@data,16,12@model,64]"));
  // Replicated heads, any batch sharding shared by all three.
  ArrayType q1 = Arr(mesh, {8, 1, 12, 64}, "P('data', None, None, None)");
  ArrayType kv1 = Arr(mesh, {8, 9, 12, 64}, "P('data', None, None, None)");
  EXPECT_THAT(AttentionRule(q1, kv1, kv1), HasType("float32[8@data,1,12,64]"));
}

TEST(AttentionRuleTest, RefusesLayoutsThatWouldNeedACollective) {
  Mesh mesh = MeshOrDie("mesh[data=2,model=4]");
  ArrayType q = Arr(mesh, {8, 16, 12, 64}, "P(None, None, 'model', None)");
  ArrayType kv = Arr(mesh, {8, 16, 4, 64}, "P(None, None, 'model', None)");
  EXPECT_THAT(AttentionRule(q, kv, Arr(mesh, {8, 16, 4, 64}, "P()")),
              StatusIs(kInvalid, "key and value must be sharded alike"));
  EXPECT_THAT(AttentionRule(q, Arr(mesh, {8, 16, 4, 64}, "P()"), Arr(mesh, {8, 16, 4, 64}, "P()")),
              StatusIs(kInvalid, "sharded by the same axes"));
  ArrayType seq = Arr(mesh, {8, 16, 12, 64}, "P(None, 'data', 'model', None)");
  EXPECT_THAT(AttentionRule(seq, kv, kv), StatusIs(kInvalid, "must not be sharded"));
  ArrayType batch = Arr(mesh, {8, 16, 12, 64}, "P('data', None, 'model', None)");
  EXPECT_THAT(AttentionRule(batch, kv, kv), StatusIs(kInvalid, "batch dim must be sharded alike"));
  // 2 kv heads cannot split into 4 shards of whole groups.
  Mesh m4 = MeshOrDie("mesh[model=4]");
  EXPECT_THAT(AttentionRule(Arr(m4, {1, 4, 8, 16}, "P(None, None, 'model', None)"),
                            Arr(m4, {1, 4, 2, 16}, "P()"), Arr(m4, {1, 4, 2, 16}, "P()")),
              StatusIs(kInvalid, "sharded by the same axes"));
}

TEST(AttentionRuleTest, RefusesBadShapes) {
  Mesh mesh = MeshOrDie("mesh[model=2]");
  ArrayType q = Arr(mesh, {2, 4, 6, 8}, "P()");
  EXPECT_THAT(AttentionRule(q, Arr(mesh, {2, 4, 4, 8}, "P()"), Arr(mesh, {2, 4, 4, 8}, "P()")),
              StatusIs(kInvalid, "query heads (6) must be a multiple of kv heads (4)"));
  EXPECT_THAT(AttentionRule(q, Arr(mesh, {2, 4, 3, 4}, "P()"), Arr(mesh, {2, 4, 3, 4}, "P()")),
              StatusIs(kInvalid, "batch and head_dim must match"));
  EXPECT_THAT(AttentionRule(q, Arr(mesh, {2, 4, 3, 8}, "P()"), Arr(mesh, {2, 5, 3, 8}, "P()")),
              StatusIs(kInvalid, "key and value must have one shape"));
  EXPECT_THAT(AttentionRule(Arr(mesh, {4, 6, 8}, "P()"), q, q), StatusIs(kInvalid, "rank 4"));
  EXPECT_THAT(AttentionRule(Arr(mesh, {2, 4, 6, 8}, "P()", DType::kInt32), q, q),
              StatusIs(kInvalid, "float operands"));
}

TEST(SelectRowsRuleTest, KeepsTheOtherEntries) {
  Mesh mesh = MeshOrDie("mesh[data=2,model=2]");
  EXPECT_THAT(SelectRowsRule(Arr(mesh, {2, 16, 8}, "P('data', None, 'model')"), 4),
              HasType("float32[2@data,4,8@model]"));
  EXPECT_THAT(SelectRowsRule(Arr(mesh, {2, 16, 8}, "P(None, 'data', None)"), 4),
              StatusIs(kInvalid, "row dim must be unsharded"));
  EXPECT_THAT(SelectRowsRule(Arr(mesh, {2, 16, 8}, "P()"), 17), StatusIs(kInvalid, "rows 17"));
  EXPECT_THAT(SelectRowsRule(Arr(mesh, {16, 8}, "P()"), 1), StatusIs(kInvalid, "rank 3"));
}

TEST(SampleRuleTest, GathersTheVocabulary) {
  Mesh mesh = MeshOrDie("mesh[data=2,model=2]");
  EXPECT_THAT(SampleRule(Arr(mesh, {2, 4, 10}, "P('data', None, 'model')"), 9),
              HasType("float32[2@data,4,42]"));
  // Partial logits (an LM head sharded over its features): the gather
  // reduces them; the records are reduced.
  EXPECT_THAT(SampleRule(Arr(mesh, {2, 4, 10}, "P('data', None, None, unreduced={'model'})"), 9),
              HasType("float32[2@data,4,42]"));
  EXPECT_THAT(SampleRule(Arr(mesh, {2, 4, 10}, "P()"), 11), StatusIs(kInvalid, "vocab_size 11"));
  EXPECT_THAT(SampleRule(Arr(mesh, {2, 4, 10}, "P()", DType::kInt32), 5),
              StatusIs(kInvalid, "float array"));
}

}  // namespace
}  // namespace rules_testing
}  // namespace meshserve
