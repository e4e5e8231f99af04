// The language-model ops of docs/model-format.md (issue #12): parsing and
// validation (clear errors naming the layer and the value) and typing with
// JAX's sharding rules (positions and rope keep the input's sharding, softmax
// with scale / causal / where, reshape's 0, einsum with param operands and a
// bias).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/typed_model.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A 1-block causal attention with GQA-free heads, positions, rope, a masked
// softmax and a tied head. EXTRA_LAYERS is spliced in before the head.
std::string Lm(absl::string_view extra_params = "", absl::string_view extra_layers = "",
               absl::string_view top = "") {
  const std::string text = absl::StrReplaceAll(R"({'name': 'lm', 'mesh': {'data': 2, 'model': 2} TOP,
  'inputs': {'ids': {'shape': [-1, -1], 'sharding': ['data'], 'dtype': 'int64'},
             'keep': {'shape': [-1, 1, 1, -1], 'sharding': ['data'], 'dtype': 'int32'}},
  'params': {'wte': {'shape': [16, 8]}, 'wpe': {'shape': [32, 8]},
             'wq': {'shape': [8, 8], 'sharding': ['model']},
             'bq': {'shape': [8], 'sharding': ['model']} EXTRA_PARAMS},
  'layers': [
    {'name': 'pos', 'op': 'positions', 'input': 'ids'},
    {'name': 'tok', 'op': 'embed', 'input': 'ids', 'table': 'wte'},
    {'name': 'pe', 'op': 'embed', 'input': 'pos', 'table': 'wpe'},
    {'name': 'x', 'op': 'add', 'inputs': ['tok', 'pe']},
    {'name': 'q', 'op': 'einsum', 'equation': 'bsi,oi->bso', 'inputs': ['x', 'wq'], 'bias': 'bq'},
    {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 2, -1]},
    {'name': 'r', 'op': 'rope', 'input': 'qh', 'theta': 500000.0, 'seq_axis': 1},
    {'name': 's', 'op': 'einsum', 'equation': 'bqhd,bkhd->bhqk', 'inputs': ['r', 'r']},
    {'name': 'p', 'op': 'softmax', 'input': 's', 'scale': 0.5, 'causal': true},
    {'name': 'pw', 'op': 'softmax', 'input': 's', 'where': 'keep'} EXTRA_LAYERS,
    {'name': 'logits', 'op': 'einsum', 'equation': 'bsd,vd->bsv', 'inputs': ['x', 'wte']}],
  'outputs': ['logits', 'p', 'pw']})",
                             {{"EXTRA_PARAMS", extra_params},
                              {"EXTRA_LAYERS", extra_layers},
                              {"TOP", top}});
  return absl::StrReplaceAll(text, {{"'", "\""}});
}

absl::StatusOr<TypedModel> TypeLm(const std::string& json) {
  auto model = ParseModelFile(json, "");
  if (!model.ok()) return model.status();
  auto mesh = ResolveMesh(*model, 4);
  if (!mesh.ok()) return mesh.status();
  return TypeModel(*model, *mesh, {{"ids", {4, 6}}, {"keep", {4, 1, 1, 6}}});
}

TEST(LmOpsTest, ParsesTheNewFields) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Lm(), ""));
  EXPECT_EQ(m.FindInput("ids")->dtype, DType::kInt64);
  const LayerDef& pos = *m.FindLayer("pos");
  EXPECT_EQ(pos.kind, ModelOp::kPositions);
  EXPECT_EQ(pos.axis, -1);
  EXPECT_EQ(m.FindLayer("q")->bias, "bq");
  EXPECT_THAT(m.FindLayer("qh")->shape, ElementsAre(0, 0, 2, -1));
  const LayerDef& r = *m.FindLayer("r");
  EXPECT_DOUBLE_EQ(r.theta, 500000.0);
  EXPECT_EQ(r.seq_axis, 1);
  const LayerDef& p = *m.FindLayer("p");
  EXPECT_DOUBLE_EQ(p.softmax_scale, 0.5);
  EXPECT_TRUE(p.causal);
  EXPECT_TRUE(p.scale.empty());
  EXPECT_EQ(m.FindLayer("pw")->where, "keep");
}

TEST(LmOpsTest, TypesWithJaxsRules) {
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeLm(Lm()));
  // positions: int32 with the input's sharding.
  EXPECT_EQ(tm.TypeOf("pos").ToString(), "int32[4@data,6]");
  EXPECT_EQ(tm.TypeOf("x").ToString(), "float32[4@data,6,8]");
  // [out, in] param operand: the output features take the param's sharding.
  EXPECT_EQ(tm.TypeOf("q").ToString(), "float32[4@data,6,8@model]");
  EXPECT_EQ(tm.TypeOf("qh").ToString(), "float32[4@data,6,2@model,4]");
  // rope and softmax keep the input's type.
  EXPECT_EQ(tm.TypeOf("r").ToString(), "float32[4@data,6,2@model,4]");
  EXPECT_EQ(tm.TypeOf("s").ToString(), "float32[4@data,2@model,6,6]");
  EXPECT_EQ(tm.TypeOf("p").ToString(), "float32[4@data,2@model,6,6]");
  EXPECT_EQ(tm.TypeOf("pw").ToString(), "float32[4@data,2@model,6,6]");
  EXPECT_EQ(tm.TypeOf("logits").ToString(), "float32[4@data,6,16]");
}

TEST(LmOpsTest, SequenceShardedPositionsKeepTheSharding) {
  std::string json = absl::StrReplaceAll(Lm(), {{R"("sharding": ["data"], "dtype": "int64")",
                                                 R"("sharding": [null, "data"], "dtype": "int64")"}});
  auto model = ParseModelFile(json, "");
  ASSERT_OK(model.status());
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(*model, 4));
  // Only type up to the positions: the later layers need a batch-sharded x.
  model->layers.resize(1);
  model->outputs = {"pos"};
  ASSERT_OK_AND_ASSIGN(TypedModel tm,
                       TypeModel(*model, mesh, {{"ids", {4, 6}}, {"keep", {4, 1, 1, 6}}}));
  EXPECT_EQ(tm.TypeOf("pos").ToString(), "int32[4,6@data]");
}

struct TypeErrorCase {
  std::string params, layers, message;
};

class LmTypeErrorTest : public ::testing::TestWithParam<TypeErrorCase> {};

TEST_P(LmTypeErrorTest, NamesTheLayerAndTheValue) {
  const TypeErrorCase& c = GetParam();
  EXPECT_THAT(TypeLm(Lm(c.params, c.layers)),
              StatusIs(absl::StatusCode::kInvalidArgument, c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LmTypeErrorTest,
    ::testing::Values(
        TypeErrorCase{"", ", {'name': 'bad', 'op': 'rope', 'input': 'q'}",
                      "layer 'bad': rope: the last dim (the rotated features) must not be "
                      "sharded, got f32[4@data,6,8@model]"},
        TypeErrorCase{"", ", {'name': 'bad', 'op': 'rope', 'input': 'x', 'seq_axis': 2}",
                      "layer 'bad': rope: seq_axis 2 is the rotated last dim"},
        TypeErrorCase{", 'odd': {'shape': [2, 3, 5]}",
                      ", {'name': 'bad', 'op': 'rope', 'input': 'odd'}",
                      "layer 'bad': rope: the last dim 5 of f32[2,3,5] must be even"},
        TypeErrorCase{"", ", {'name': 'bad', 'op': 'positions', 'input': 'ids', 'axis': 2}",
                      "layer 'bad': positions axis 2 is out of bounds for array of rank 2"},
        TypeErrorCase{"", ", {'name': 'bad', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 8, 0]}",
                      "layer 'bad': reshape shape [0,0,8,0]: dim 3 is 0 (copy the input's dim) "
                      "but the input [4,6,8] has rank 3"},
        TypeErrorCase{", 'v1': {'shape': [8]}",
                      ", {'name': 'bad', 'op': 'softmax', 'input': 'v1', 'causal': true}",
                      "layer 'bad': softmax: causal needs rank >= 2"},
        TypeErrorCase{"", ", {'name': 'bad', 'op': 'softmax', 'input': 's', 'where': 'x'}",
                      "layer 'bad': softmax where got incompatible shapes for broadcasting"},
        TypeErrorCase{", 'b3': {'shape': [3]}",
                      ", {'name': 'bad', 'op': 'einsum', 'equation': 'bsi,oi->bso', "
                      "'inputs': ['x', 'wq'], 'bias': 'b3'}",
                      "layer 'bad': einsum: bias must have shape (8,), got f32[3]"}));

struct ParseErrorCase {
  std::string params, layers, top, message;
};

class LmParseErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(LmParseErrorTest, NamesTheLayerAndTheValue) {
  const ParseErrorCase& c = GetParam();
  auto result = ParseModelFile(Lm(c.params, c.layers, c.top), "");
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument, c.message));
  if (!result.ok()) {
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("model 'lm'"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LmParseErrorTest,
    ::testing::Values(
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'softmax', 'input': 's', 'scale': 0}", "",
                       "layer 'bad': softmax scale 0 must be a finite non-zero number"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'softmax', 'input': 's', 'scale': 'x'}", "",
                       "layer 'bad': softmax scale"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'softmax', 'input': 's', 'causal': 1}", "",
                       "layer 'bad': causal"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'softmax', 'input': 's', 'where': 'later'}",
                       "", "layer 'bad': where 'later' is not an input, a param or an earlier"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'rope', 'input': 'qh', 'theta': -1}", "",
                       "layer 'bad': rope theta -1 must be a finite number > 0"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'reshape', 'input': 'q', 'shape': [0, -2]}",
                       "", "layer 'bad': shape [0,-2]: dim 1 is -2"},
        ParseErrorCase{"", ", {'name': 'bad', 'op': 'reshape', 'input': 'q', 'shape': [-1, -1]}",
                       "", "layer 'bad': shape [-1,-1] has more than one -1"},
        ParseErrorCase{", 'f': {'shape': [2, 3], 'from': 'w', 'from_offset': [1]}", "",
                       ", 'checkpoint': 'c.safetensors'",
                       "param 'f' from_offset [1] has 1 entries for rank 2"},
        ParseErrorCase{", 'f': {'shape': [2, 3], 'from': 'w', 'from_offset': [0, -3]}", "",
                       ", 'checkpoint': 'c.safetensors'",
                       "param 'f' from_offset [0,-3]: dim 1 is -3 (must be >= 0)"},
        ParseErrorCase{", 'f': {'shape': [2, 3], 'from': 'w'}", "", "",
                       "param 'f' sets from 'w' but the model has no checkpoint"},
        ParseErrorCase{", 'f': {'shape': [2], 'dtype': 'F8'}", "", "",
                       "param 'f' dtype 'F8' is not supported"},
        ParseErrorCase{"", "", ", 'checkpoint': []", "checkpoint must not be an empty list"},
        ParseErrorCase{"", "", ", 'checkpoint': ['a.safetensors', '']",
                       "checkpoint [\"a.safetensors\",\"\"]: a path is empty"}));

TEST(LmOpsTest, CheckpointForms) {
  ASSERT_OK_AND_ASSIGN(
      ModelFile one,
      ParseModelFile(Lm("", "", ", 'checkpoint': 'model.safetensors.index.json'"), "/m"));
  EXPECT_THAT(one.checkpoints, ElementsAre("/m/model.safetensors.index.json"));
  ASSERT_OK_AND_ASSIGN(
      ModelFile list,
      ParseModelFile(Lm(", 'f': {'shape': [2, 3], 'from': 'w', 'from_offset': [1, 2], "
                        "'dtype': 'F16'}",
                        "", ", 'checkpoint': ['a.safetensors', '/abs/b.safetensors']"),
                     "/m"));
  EXPECT_THAT(list.checkpoints, ElementsAre("/m/a.safetensors", "/abs/b.safetensors"));
  EXPECT_EQ(list.checkpoint, "/m/a.safetensors");
  const ParamDef& f = *list.FindParam("f");
  EXPECT_TRUE(f.has_from);
  EXPECT_EQ(f.from, "w");
  EXPECT_THAT(f.from_offset, ElementsAre(1, 2));
  EXPECT_EQ(f.dtype, DType::kFloat32);  // F16 widened
  const ParamDef& wte = *list.FindParam("wte");
  EXPECT_FALSE(wte.has_from);
  EXPECT_EQ(wte.from, "wte");
  EXPECT_THAT(wte.from_offset, ElementsAre(0, 0));
}

}  // namespace
}  // namespace meshserve
