#include "common/model/typed_model.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

std::string Swiglu(absl::string_view y_extra) {
  return absl::StrReplaceAll(absl::StrCat(R"({
  'name': 'swiglu', 'mesh': {'fsdp': 2, 'model': 4}, 'dtype': 'float32',
  'inputs': {'x': {'shape': [-1, -1, 2048], 'sharding': ['fsdp', null, null]}},
  'params': {
    'gate_proj.kernel': {'shape': [2048, 8192], 'sharding': ['fsdp', 'model']},
    'up_proj.kernel':   {'shape': [2048, 8192], 'sharding': ['fsdp', 'model']},
    'down_proj.kernel': {'shape': [8192, 2048], 'sharding': ['model', 'fsdp']}},
  'layers': [
    {'name': 'gate', 'op': 'linear', 'input': 'x', 'kernel': 'gate_proj.kernel'},
    {'name': 'up',   'op': 'linear', 'input': 'x', 'kernel': 'up_proj.kernel'},
    {'name': 'act',  'op': 'silu',   'input': 'gate'},
    {'name': 'h',    'op': 'mul',    'inputs': ['act', 'up']},
    {'name': 'y',    'op': 'linear', 'input': 'h', 'kernel': 'down_proj.kernel')",
                                          y_extra, R"(}],
  'outputs': ['y']})"),
                             {{"'", "\""}});
}

absl::StatusOr<TypedModel> TypeSwiglu(absl::string_view y_extra,
                                      std::map<std::string, PartitionSpec> overrides = {}) {
  auto model = ParseModelFile(Swiglu(y_extra), "");
  if (!model.ok()) return model.status();
  auto mesh = ResolveMesh(*model, 8);
  if (!mesh.ok()) return mesh.status();
  return TypeModel(*model, *mesh, {{"x", {8, 16, 2048}}}, overrides);
}

TEST(TypedModelTest, TypesTheSeedSwiglu) {
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeSwiglu(R"(, 'out_sharding': ['fsdp', null, 'model'])"));
  EXPECT_EQ(tm.TypeOf("x").ToString(), "float32[8@fsdp,16,2048]");
  EXPECT_EQ(tm.TypeOf("gate_proj.kernel").ToString(), "float32[2048@fsdp,8192@model]");
  EXPECT_EQ(tm.TypeOf("gate").ToString(), "float32[8@fsdp,16,8192@model]");
  EXPECT_EQ(tm.TypeOf("h").ToString(), "float32[8@fsdp,16,8192@model]");
  EXPECT_EQ(tm.TypeOf("y").ToString(), "float32[8@fsdp,16,2048@model]");
  EXPECT_THAT(tm.ToString(), HasSubstr("y: float32[8@fsdp,16,2048@model]"));
}

TEST(TypedModelTest, DownProjWithoutOutShardingIsJaxsError) {
  EXPECT_THAT(TypeSwiglu(""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "layer 'y': Contracting dimensions are sharded and it is ambiguous"));
}

TEST(TypedModelTest, UnreducedOutSharding) {
  ASSERT_OK_AND_ASSIGN(
      TypedModel tm,
      TypeSwiglu(R"(, 'out_sharding': {'spec': ['fsdp', null, null], 'unreduced': ['model']})"));
  EXPECT_EQ(tm.TypeOf("y").ToString(), "float32[8@fsdp,16,2048]{U:model}");
}

TEST(TypedModelTest, RequestOverrideReplacesTheOutputLayersOutSharding) {
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeSwiglu("", {{"y", PartitionSpec({{"fsdp"}})}}));
  EXPECT_EQ(tm.TypeOf("y").ToString(), "float32[8@fsdp,16,2048]");
}

TEST(TypedModelTest, OverrideOfANonOutputIsRejected) {
  EXPECT_THAT(TypeSwiglu("", {{"gate", PartitionSpec({{"fsdp"}})}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "override for 'gate'"));
}

TEST(TypedModelTest, InputShapeMismatch) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Swiglu(", 'out_sharding': ['fsdp']"), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  EXPECT_THAT(TypeModel(m, mesh, {{"x", {8, 16, 1024}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input 'x': request shape [8,16,1024] does not match [-1,-1,2048]"));
  EXPECT_THAT(TypeModel(m, mesh, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "input 'x': missing"));
  EXPECT_THAT(TypeModel(m, mesh, {{"x", {3, 16, 2048}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "input 'x'"));
}

TEST(TypedModelTest, ValidateModelNamesModelAndLayer) {
  ASSERT_OK_AND_ASSIGN(ModelFile bad, ParseModelFile(Swiglu(""), ""));
  EXPECT_THAT(ValidateModel(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "model 'swiglu': layer 'y': Contracting dimensions are sharded"));
  ASSERT_OK_AND_ASSIGN(ModelFile good,
                       ParseModelFile(Swiglu(", 'out_sharding': ['fsdp', null, 'model']"), ""));
  EXPECT_OK(ValidateModel(good));
}

TEST(TypedModelTest, ValidateModelWithAMinusOneAxis) {
  std::string text = absl::StrReplaceAll(Swiglu(", 'out_sharding': ['fsdp', null, 'model']"),
                                         {{"\"fsdp\": 2", "\"fsdp\": -1"}});
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(text, ""));
  EXPECT_EQ(NominalDimSize(m), 4);
  EXPECT_OK(ValidateModel(m));
}

TEST(TypedModelTest, AutoAxesResultIsTheOutSharding) {
  ASSERT_OK_AND_ASSIGN(
      TypedModel tm, TypeSwiglu(R"(, 'out_sharding': [null, null, 'fsdp'], 'auto_axes': true)"));
  EXPECT_EQ(tm.TypeOf("y").ToString(), "float32[8,16,2048@fsdp]");
}

TEST(TypedModelTest, ShardedBiasBroadcastIsJaxsError) {
  std::string text = absl::StrReplaceAll(R"({'name': 'lin', 'mesh': {'data': 8},
    'inputs': {'x': {'shape': [-1, 32], 'sharding': ['data']}},
    'params': {'k': {'shape': [32, 64], 'sharding': [null, 'data']},
               'b': {'shape': [64], 'sharding': ['data']}},
    'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'k', 'bias': 'b',
                'out_sharding': ['data']}],
    'outputs': ['y']})",
                                         {{"'", "\""}});
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(text, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  EXPECT_THAT(TypeModel(m, mesh, {{"x", {16, 32}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "layer 'y': add operation with inputs: f32[16@data,64], f32[64@data] "
                       "produces an illegally sharded result"));
}

TEST(TypedModelTest, AttentionPiecesTypeWithTheRules) {
  std::string text = absl::StrReplaceAll(R"({
  'name': 'attn', 'mesh': {'data': 2, 'model': 2},
  'inputs': {'x': {'shape': [-1, 8, 16], 'sharding': ['data']}},
  'params': {'wq': {'shape': [16, 16], 'sharding': [null, 'model']},
             'norm.scale': {'shape': [16], 'init': 'ones'}},
  'layers': [
    {'name': 'xn', 'op': 'rms_norm', 'input': 'x', 'scale': 'norm.scale'},
    {'name': 'q', 'op': 'linear', 'input': 'xn', 'kernel': 'wq'},
    {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [-1, 8, 4, 4]},
    {'name': 's', 'op': 'einsum', 'equation': 'bqhd,bkhd->bhqk', 'inputs': ['qh', 'qh']},
    {'name': 'p', 'op': 'softmax', 'input': 's', 'axis': -1},
    {'name': 'pt', 'op': 'transpose', 'input': 'p', 'perm': [0, 2, 1, 3]}],
  'outputs': ['pt']})",
                                         {{"'", "\""}});
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(text, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 4));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {4, 8, 16}}}));
  EXPECT_EQ(tm.TypeOf("q").ToString(), "float32[4@data,8,16@model]");
  EXPECT_EQ(tm.TypeOf("qh").ToString(), "float32[4@data,8,4@model,4]");
  EXPECT_EQ(tm.TypeOf("s").ToString(), "float32[4@data,4@model,8,8]");
  EXPECT_EQ(tm.TypeOf("pt").ToString(), "float32[4@data,8,4@model,8]");
}

}  // namespace
}  // namespace meshserve
