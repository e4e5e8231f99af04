#include "common/model/model_file.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The seed's SwiGLU block (model-format.md), with single quotes for readability.
std::string SwigluJson() {
  return absl::StrReplaceAll(R"({
  'name': 'swiglu',
  'mesh': {'fsdp': 2, 'model': 4},
  'dtype': 'float32',
  'seed': 0,
  'checkpoint': 'swiglu.safetensors',
  'inputs': {'x': {'shape': [-1, -1, 2048], 'sharding': ['fsdp', null, null]}},
  'params': {
    'gate_proj.kernel': {'shape': [2048, 8192], 'sharding': ['fsdp', 'model'], 'init': 'lecun_normal'},
    'up_proj.kernel':   {'shape': [2048, 8192], 'sharding': ['fsdp', 'model'], 'init': 'lecun_normal'},
    'down_proj.kernel': {'shape': [8192, 2048], 'sharding': ['model', 'fsdp'], 'init': 'lecun_normal'}
  },
  'layers': [
    {'name': 'gate', 'op': 'linear', 'input': 'x', 'kernel': 'gate_proj.kernel'},
    {'name': 'up',   'op': 'linear', 'input': 'x', 'kernel': 'up_proj.kernel'},
    {'name': 'act',  'op': 'silu',   'input': 'gate'},
    {'name': 'h',    'op': 'mul',    'inputs': ['act', 'up']},
    {'name': 'y',    'op': 'linear', 'input': 'h', 'kernel': 'down_proj.kernel',
     'out_sharding': ['fsdp', null, 'model']}
  ],
  'outputs': ['y']
})",
                             {{"'", "\""}});
}

// The seed with one substring replaced (must occur).
std::string Edited(absl::string_view from, absl::string_view to) {
  std::string text = SwigluJson();
  size_t pos = text.find(std::string(from));
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), std::string(to));
  return text;
}

TEST(ModelFileTest, ParsesTheSeedSwiglu) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(SwigluJson(), "/models"));
  EXPECT_EQ(m.name, "swiglu");
  ASSERT_EQ(m.mesh_axes.size(), 2u);
  EXPECT_EQ(m.mesh_axes[0].first, "fsdp");
  EXPECT_EQ(m.mesh_axes[0].second, 2);
  EXPECT_EQ(m.mesh_axes[1].first, "model");
  EXPECT_EQ(m.checkpoint, "/models/swiglu.safetensors");
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_THAT(m.inputs[0].shape, ElementsAre(-1, -1, 2048));
  ASSERT_EQ(m.inputs[0].sharding.entries().size(), 3u);
  EXPECT_THAT(m.inputs[0].sharding.entries()[0], ElementsAre("fsdp"));
  EXPECT_TRUE(m.inputs[0].sharding.entries()[1].empty());
  ASSERT_EQ(m.params.size(), 3u);
  EXPECT_EQ(m.params[2].name, "down_proj.kernel");
  EXPECT_EQ(m.params[2].init, InitKind::kLecunNormal);
  EXPECT_THAT(m.params[2].shape, ElementsAre(8192, 2048));
  ASSERT_EQ(m.layers.size(), 5u);
  EXPECT_EQ(m.layers[3].kind, ModelOp::kMul);
  EXPECT_THAT(m.layers[3].inputs, ElementsAre("act", "up"));
  EXPECT_EQ(m.layers[4].kernel, "down_proj.kernel");
  ASSERT_TRUE(m.layers[4].out_sharding.has_value());
  EXPECT_THAT(m.layers[4].out_sharding->entries()[2], ElementsAre("model"));
  EXPECT_FALSE(m.layers[0].out_sharding.has_value());
  EXPECT_THAT(m.outputs, ElementsAre("y"));
  EXPECT_EQ(m.json_text, SwigluJson());
  EXPECT_NE(m.FindLayer("act"), nullptr);
  EXPECT_EQ(m.FindLayer("nope"), nullptr);
}

TEST(ModelFileTest, KeepsMeshAxisOrderAsWritten) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Edited(R"("fsdp": 2, "model": 4)",
                                                          R"("model": 4, "fsdp": -1)"),
                                                   ""));
  EXPECT_EQ(m.mesh_axes[0].first, "model");
  EXPECT_EQ(m.mesh_axes[1].second, -1);
}

TEST(ModelFileTest, ParsesUnreducedOutShardingAndAutoAxes) {
  ASSERT_OK_AND_ASSIGN(
      ModelFile m,
      ParseModelFile(Edited(R"("out_sharding": ["fsdp", null, "model"])",
                            R"("out_sharding": {"spec": ["fsdp", null, null], "unreduced": ["model"]}, "auto_axes": true)"),
                     ""));
  const LayerDef& y = m.layers[4];
  EXPECT_TRUE(y.auto_axes);
  ASSERT_TRUE(y.out_sharding.has_value());
  EXPECT_THAT(y.out_sharding->unreduced(), ElementsAre("model"));
}

TEST(ModelFileTest, ParsesParamOptionsAndTupleSpecs) {
  ASSERT_OK_AND_ASSIGN(
      ModelFile m,
      ParseModelFile(Edited(R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)",
                            R"("sharding": [["fsdp", "model"], null], "init": "normal", "stddev": 0.5, "dtype": "bfloat16"},
    "up_proj)"),
                     ""));
  const ParamDef& p = m.params[0];
  EXPECT_EQ(p.init, InitKind::kNormal);
  EXPECT_DOUBLE_EQ(p.stddev, 0.5);
  EXPECT_EQ(p.dtype, DType::kBFloat16);
  EXPECT_THAT(p.sharding.entries()[0], ElementsAre("fsdp", "model"));
}

TEST(ModelFileTest, AbsoluteCheckpointIsKept) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Edited(R"("swiglu.safetensors")",
                                                          R"("/data/w.safetensors")"),
                                                   "/models"));
  EXPECT_EQ(m.checkpoint, "/data/w.safetensors");
}

TEST(ModelFileTest, ParsesCheckpointTiedAndIgnored) {
  ASSERT_OK_AND_ASSIGN(
      ModelFile m,
      ParseModelFile(Edited(R"("outputs": ["y"])",
                            R"("outputs": ["y"], "checkpoint_tied": {"head.w": "up_proj.kernel"},
                               "checkpoint_ignored": ["h.0.attn.bias", "h.0.attn.masked_bias"])"),
                     ""));
  EXPECT_EQ(m.checkpoint_tied.at("head.w"), "up_proj.kernel");
  EXPECT_THAT(m.checkpoint_ignored, ElementsAre("h.0.attn.bias", "h.0.attn.masked_bias"));
}

struct BadCase {
  const char* from;
  const char* to;
  const char* message;  // substring of the error
};

class ModelFileErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelFileErrorTest, RejectsWithContext) {
  const BadCase& c = GetParam();
  auto result = ParseModelFile(Edited(c.from, c.to), "");
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument, c.message));
  if (!result.ok() && std::string(c.message).find("model file") == std::string::npos) {
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("model 'swiglu'"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, ModelFileErrorTest,
    ::testing::Values(
        BadCase{R"("op": "silu")", R"("op": "lineer")", "layer 'act': unknown op 'lineer'"},
        BadCase{R"("fsdp": 2, "model": 4)", R"("fsdp": -1, "model": -1)",
                "at most one axis may be -1 (axis 'model')"},
        BadCase{R"("fsdp": 2, "model": 4)", R"("fsdp": 0, "model": 4)",
                "mesh axis 'fsdp' has size 0"},
        BadCase{R"("mesh": {"fsdp": 2, "model": 4},)", "", "missing field 'mesh'"},
        BadCase{R"("dtype": "float32")", R"("dtype": "int8")", "dtype 'int8' is not supported"},
        BadCase{R"("shape": [-1, -1, 2048])", R"("shape": [-1, 0, 2048])",
                "input 'x' shape [-1,0,2048]: dim 1 is 0"},
        BadCase{R"("shape": [2048, 8192], "sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)",
                R"("shape": [-1, 8192], "sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)",
                "param 'gate_proj.kernel' shape [-1,8192]: dim 0 is -1"},
        BadCase{R"("sharding": ["fsdp", null, null])", R"("sharding": ["data", null, null])",
                "input 'x' sharding [\"data\",null,null]: axis 'data' is not in the mesh (fsdp, model)"},
        BadCase{R"("sharding": ["fsdp", null, null])", R"("sharding": ["fsdp", "fsdp", null])",
                "axis 'fsdp' is used twice"},
        BadCase{R"("sharding": ["fsdp", null, null])", R"("sharding": ["fsdp", null, null, null])",
                "input 'x' sharding [\"fsdp\",null,null,null] has 4 entries for rank 3"},
        BadCase{R"("sharding": ["fsdp", null, null])", R"("sharding": ["fsdp", 3, null])",
                "entry 1 must be null, an axis name or a list of axis names, got 3"},
        BadCase{R"("init": "lecun_normal"},
    "up_proj)",
                R"("init": "glorot"},
    "up_proj)",
                "param 'gate_proj.kernel' init 'glorot' is unknown"},
        BadCase{R"("kernel": "gate_proj.kernel")", R"("kernel": "gate.kernel")",
                "layer 'gate': kernel 'gate.kernel' is not a param"},
        BadCase{R"("op": "linear", "input": "x", "kernel": "up_proj.kernel")",
                R"("op": "linear", "input": "x")", "layer 'up': missing 'kernel'"},
        BadCase{R"("input": "gate")", R"("input": "gat")",
                "layer 'act': operand 'gat' is not an input, a param or an earlier layer"},
        BadCase{R"("inputs": ["act", "up"])", R"("inputs": ["act", "y"])",
                "layer 'h': operand 'y' is not an input"},
        BadCase{R"("inputs": ["act", "up"])", R"("inputs": ["act"])",
                "layer 'h': op 'mul' needs 'inputs' with two names"},
        BadCase{R"("op": "silu",   "input": "gate")", R"("op": "silu", "inputs": ["gate"])",
                "layer 'act': op 'silu' takes one 'input', not 'inputs'"},
        BadCase{R"({"name": "up",)", R"({"name": "gate",)",
                "layer 'gate': name 'gate' is already used"},
        BadCase{R"("outputs": ["y"])", R"("outputs": ["z"])", "output 'z' is not a layer"},
        BadCase{R"("outputs": ["y"])", R"("outputs": ["y", "y"])", "output 'y' is listed twice"},
        BadCase{R"("out_sharding": ["fsdp", null, "model"])",
                R"("out_sharding": {"spec": ["fsdp"], "unreduced": ["modle"]})",
                "layer 'y': out_sharding {\"spec\":[\"fsdp\"],\"unreduced\":[\"modle\"]}: axis 'modle' is not in the mesh"},
        BadCase{R"("out_sharding": ["fsdp", null, "model"])",
                R"("out_sharding": {"specs": ["fsdp"]})", "unknown field 'specs'"},
        BadCase{R"("op": "silu",   "input": "gate")",
                R"("op": "silu", "input": "gate", "auto_axes": true)",
                "layer 'act': auto_axes requires out_sharding"},
        BadCase{R"("op": "silu",   "input": "gate")", R"("op": "reshard", "input": "gate")",
                "layer 'act': op 'reshard' requires out_sharding"},
        BadCase{R"("op": "silu",   "input": "gate")",
                R"("op": "reshape", "input": "gate", "shape": [-1, -1])",
                "layer 'act': shape [-1,-1] has more than one -1"},
        BadCase{R"("op": "silu",   "input": "gate")",
                R"("op": "transpose", "input": "gate", "perm": [0, 0, 1])",
                "layer 'act': perm [0,0,1] is not a permutation"},
        BadCase{R"("op": "silu",   "input": "gate")",
                R"("op": "einsum", "inputs": ["gate", "up"], "equation": "ab")",
                "layer 'act': equation 'ab' must have the form"},
        BadCase{R"("op": "silu",   "input": "gate")", R"("op": "rms_norm", "input": "gate")",
                "layer 'act': missing 'scale'"},
        BadCase{R"("seed": 0)", R"("seed": "zero")", "seed must be an integer, got \"zero\""},
        BadCase{R"("seed": 0)", R"("sede": 0)", "top level: unknown field 'sede'"},
        BadCase{R"("name": "swiglu",)", "", "model file: missing or empty string field 'name'"},
        BadCase{R"("outputs": ["y"])", R"("outputs": ["y"], "checkpoint_tied": {"a": "nope"})",
                "checkpoint_tied 'a' -> 'nope': the twin is no param"},
        BadCase{R"("outputs": ["y"])",
                R"("outputs": ["y"], "checkpoint_tied": {"up_proj.kernel": "gate_proj.kernel"})",
                "checkpoint_tied names 'up_proj.kernel', which a param is or reads"},
        BadCase{R"("outputs": ["y"])", R"("outputs": ["y"], "checkpoint_ignored": ["b", "b"])",
                "checkpoint_ignored names 'b' twice"},
        BadCase{R"("outputs": ["y"])", R"("outputs": ["y"], "checkpoint_ignored": "b")",
                "checkpoint_ignored must be a list of strings"},
        BadCase{R"("outputs": ["y"]
})", R"("outputs": ["y"])", "model file: "}));

TEST(ModelFileTest, LoadModelFileResolvesCheckpointBesideTheFile) {
  std::string dir = ::testing::TempDir();
  std::string path = dir + "/swiglu.json";
  {
    std::ofstream out(path);
    out << SwigluJson();
  }
  ASSERT_OK_AND_ASSIGN(ModelFile m, LoadModelFile(path));
  std::string expected_dir = path.substr(0, path.rfind('/'));
  EXPECT_EQ(m.model_dir, expected_dir);
  EXPECT_EQ(m.checkpoint, expected_dir + "/swiglu.safetensors");
  std::remove(path.c_str());
}

TEST(ModelFileTest, LoadModelFileMissingIsNotFound) {
  EXPECT_THAT(LoadModelFile("/nonexistent/dir/m.json"),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/dir/m.json"));
}

}  // namespace
}  // namespace meshserve

namespace meshserve {
namespace {

// "sharding": "auto" (the layout search chooses it): parsed only when allowed,
// else refused naming the param; a string that is no spec is refused naming
// the param and the value; a JAX-written spec string still parses.
TEST(ModelFileTest, AutoShardingIsParsedOnlyWhenAllowed) {
  const std::string text = Edited(R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)", R"("sharding": "auto", "init": "lecun_normal"},
    "up_proj)");
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(text, "", /*allow_auto_sharding=*/true));
  ASSERT_NE(m.FindParam("gate_proj.kernel"), nullptr);
  EXPECT_TRUE(m.FindParam("gate_proj.kernel")->auto_sharding);
  EXPECT_EQ(m.FindParam("gate_proj.kernel")->sharding.size(), 0);
  EXPECT_FALSE(m.FindParam("up_proj.kernel")->auto_sharding);
  EXPECT_THAT(ParseModelFile(text, "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'gate_proj.kernel' sharding \"auto\" is not resolved"));
  const std::string bad = Edited(R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)", R"("sharding": "automatic", "init": "lecun_normal"},
    "up_proj)");
  const absl::Status status = ParseModelFile(bad, "", true).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, "param 'gate_proj.kernel'"));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, "automatic"));
  // A spec written as JAX writes it is still a spec.
  const std::string jax_text = Edited(R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)", R"x("sharding": "P('fsdp', 'model')", "init": "lecun_normal"},
    "up_proj)x");
  ASSERT_OK_AND_ASSIGN(ModelFile spec, ParseModelFile(jax_text, ""));
  EXPECT_FALSE(spec.FindParam("gate_proj.kernel")->auto_sharding);
  EXPECT_EQ(spec.FindParam("gate_proj.kernel")->sharding.ToString(), "P('fsdp', 'model')");
}

}  // namespace
}  // namespace meshserve
