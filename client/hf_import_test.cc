// The importer's pieces without a cluster: config.json parsing, the mesh
// flag, the sharding plan, the checkpoint index and the model file it writes
// for small GPT-2 and Llama checkpoints in Hugging Face's names and layouts.
// (Serving the imported models against a NumPy forward pass:
// tests/integration/test_lm_import.py.)
#include "client/hf_import.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model/model_file.h"
#include "common/tensor/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

const char kGpt2Config[] = R"({"architectures": ["GPT2LMHeadModel"], "n_layer": 1,
  "n_embd": 8, "n_head": 2, "vocab_size": 11, "n_positions": 6, "n_inner": null})";
const char kLlamaConfig[] = R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
  "hidden_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 12, "vocab_size": 16, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
  "rope_scaling": null})";

std::string TempDir(absl::string_view name) {
  std::string dir = absl::StrCat(::testing::TempDir(), "/hf_import_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteText(const std::string& path, absl::string_view text) {
  std::ofstream(path) << text;
}

// Zero tensors of the given shapes in one safetensors file.
void WriteTensors(const std::string& path,
                  const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, shape] : shapes) tensors[name] = Tensor::Zeros(DType::kFloat32, shape);
  ASSERT_THAT(WriteSafetensors(path, tensors), IsOk());
}

// A 1-layer GPT-2 (d=8, 2 heads, f=32, V=11, P=6) in HF names, `prefix` before each.
std::map<std::string, std::vector<int64_t>> Gpt2Tensors(const std::string& prefix) {
  std::map<std::string, std::vector<int64_t>> t = {
      {"wte.weight", {11, 8}},          {"wpe.weight", {6, 8}},
      {"h.0.ln_1.weight", {8}},         {"h.0.ln_1.bias", {8}},
      {"h.0.attn.c_attn.weight", {8, 24}}, {"h.0.attn.c_attn.bias", {24}},
      {"h.0.attn.c_proj.weight", {8, 8}},  {"h.0.attn.c_proj.bias", {8}},
      {"h.0.ln_2.weight", {8}},         {"h.0.ln_2.bias", {8}},
      {"h.0.mlp.c_fc.weight", {8, 32}}, {"h.0.mlp.c_fc.bias", {32}},
      {"h.0.mlp.c_proj.weight", {32, 8}}, {"h.0.mlp.c_proj.bias", {8}},
      {"ln_f.weight", {8}},             {"ln_f.bias", {8}},
      {"h.0.attn.bias", {1, 1, 6, 6}},  // the causal-mask buffer: ignored
  };
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& [name, shape] : t) out[prefix + name] = shape;
  return out;
}

absl::StatusOr<Json> ModelJson(const std::string& dir, const std::string& config,
                               const MeshAxes& mesh) {
  MS_ASSIGN_OR_RETURN(LmConfig c, ParseHfConfig(config, "config.json"));
  MS_ASSIGN_OR_RETURN(HfCheckpoint ckpt, HfCheckpoint::Open(dir));
  MS_ASSIGN_OR_RETURN(std::string text, LmModelFileText("m", c, mesh, &ckpt, "x", nullptr));
  return Json::parse(text);
}

TEST(HfConfigTest, Gpt2DefaultsFollowHuggingFace) {
  ASSERT_OK_AND_ASSIGN(LmConfig c, ParseHfConfig(kGpt2Config, "config.json"));
  EXPECT_EQ(c.arch, LmArch::kGpt2);
  EXPECT_EQ(c.intermediate, 32);  // n_inner null: 4 * n_embd
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c.norm_epsilon, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(HfConfigTest, LlamaReadsGroupedQueryHeadsAndRope) {
  ASSERT_OK_AND_ASSIGN(LmConfig c, ParseHfConfig(kLlamaConfig, "config.json"));
  EXPECT_EQ(c.arch, LmArch::kLlama);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 2);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500.0);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(HfConfigTest, RejectsWhatItCannotImportNamingTheValue) {
  EXPECT_THAT(ParseHfConfig(R"({"architectures": ["BertForMaskedLM"]})", "c.json"),
              StatusIs(kInvalid, "BertForMaskedLM"));
  std::string llama3 = kLlamaConfig;
  llama3.replace(llama3.find("null"), 4, R"({"rope_type": "llama3", "factor": 8.0})");
  EXPECT_THAT(ParseHfConfig(llama3, "c.json"), StatusIs(kInvalid, "rope_scaling"));
  EXPECT_THAT(ParseHfConfig("{\"n_layer\": ", "c.json"), StatusIs(kInvalid, "broken JSON"));
  EXPECT_THAT(ParseHfConfig(R"({"architectures": ["GPT2LMHeadModel"], "n_layer": 1})", "c.json"),
              StatusIs(kInvalid, "n_embd"));
  std::string erf = kGpt2Config;
  erf.insert(1, R"("activation_function": "gelu", )");
  EXPECT_THAT(ParseHfConfig(erf, "c.json"), StatusIs(kInvalid, "activation_function \"gelu\""));
}

TEST(MeshAxesTest, ParsesAndRejects) {
  ASSERT_OK_AND_ASSIGN(MeshAxes mesh, ParseMeshAxes("data=2,model=-1"));
  EXPECT_EQ(mesh, (MeshAxes{{"data", 2}, {"model", -1}}));
  EXPECT_THAT(ParseMeshAxes("fsdp=2"), StatusIs(kInvalid, "axis 'fsdp'"));
  EXPECT_THAT(ParseMeshAxes("model=0"), StatusIs(kInvalid, "'model=0'"));
  EXPECT_THAT(ParseMeshAxes("data=-1,model=-1"), StatusIs(kInvalid, "at most one"));
  EXPECT_THAT(ParseMeshAxes("model=2,model=2"), StatusIs(kInvalid, "twice"));
}

TEST(ShardPlanTest, ShardsWhatDividesAndLeavesTheRest) {
  ASSERT_OK_AND_ASSIGN(LmConfig gpt2, ParseHfConfig(kGpt2Config, "c"));
  gpt2.vocab = 50257;
  LmShardPlan p = PlanShardings(gpt2, {{"model", 2}});
  EXPECT_TRUE(p.attn && p.mlp);
  EXPECT_FALSE(p.vocab || p.data);  // 50257 is odd
  ASSERT_OK_AND_ASSIGN(LmConfig llama, ParseHfConfig(kLlamaConfig, "c"));
  p = PlanShardings(llama, {{"data", 2}, {"model", 4}});
  EXPECT_TRUE(p.data && p.mlp && p.vocab);
  EXPECT_FALSE(p.attn);  // 2 KV heads on 4
  p = PlanShardings(llama, {{"model", -1}});
  EXPECT_TRUE(p.attn && p.mlp);
  EXPECT_FALSE(p.vocab);  // -1: never the vocabulary
}

TEST(LmModelFileTest, Gpt2SplitsCAttnIntoColumnBoxes) {
  const std::string dir = TempDir("gpt2");
  WriteTensors(dir + "/model.safetensors", Gpt2Tensors("transformer."));
  ASSERT_OK_AND_ASSIGN(Json m, ModelJson(dir, kGpt2Config, {{"model", -1}}));
  const Json& k = m["params"]["h.0.attn.k.weight"];
  EXPECT_EQ(k["from"], "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(k["from_offset"], Json::array({0, 8}));
  EXPECT_EQ(k["shape"], Json::array({8, 8}));
  EXPECT_EQ(k["sharding"], Json::array({nullptr, "model"}));
  EXPECT_EQ(m["params"]["h.0.attn.v.bias"]["from_offset"], Json::array({16}));
  EXPECT_EQ(m["params"]["h.0.mlp.c_proj.weight"]["sharding"], Json::array({"model", nullptr}));
  EXPECT_EQ(m["params"]["wte.weight"]["sharding"], Json::array({nullptr, nullptr}));
  EXPECT_FALSE(m["params"].contains("lm_head.weight"));
  EXPECT_EQ(m["layers"].back()["inputs"], Json::array({"ln_f", "wte.weight"}));  // tied
  EXPECT_EQ(m["inputs"]["input_ids"]["dtype"], "int32");
  EXPECT_EQ(m["outputs"], Json::array({"logits"}));
}

// A state_dict's names (prefixed "transformer.", lm_head.weight, the mask
// buffers) resolve through checkpoint_tied / checkpoint_ignored.
TEST(LmModelFileTest, Gpt2WritesTiedAndIgnoredCheckpointNames) {
  const std::string dir = TempDir("gpt2_names");
  auto tensors = Gpt2Tensors("");
  tensors["h.0.attn.extra"] = {2};  // read by no param
  WriteTensors(dir + "/model.safetensors", tensors);
  ASSERT_OK_AND_ASSIGN(Json m, ModelJson(dir, kGpt2Config, {{"model", -1}}));
  const Json& tied = m["checkpoint_tied"];
  EXPECT_EQ(tied["lm_head.weight"], "wte.weight");
  EXPECT_EQ(tied["transformer.h.0.attn.c_attn.weight"], "h.0.attn.c_attn.weight");
  EXPECT_EQ(tied["transformer.wte.weight"], "wte.weight");
  EXPECT_FALSE(tied.contains("wte.weight"));              // a param itself
  EXPECT_FALSE(tied.contains("h.0.attn.c_attn.weight"));  // read by q, k, v
  EXPECT_EQ(m["checkpoint_ignored"],
            Json::array({"h.0.attn.bias", "h.0.attn.extra", "h.0.attn.masked_bias",
                         "transformer.h.0.attn.bias", "transformer.h.0.attn.masked_bias"}));
  // The server's parser accepts what the importer wrote.
  EXPECT_OK(ParseModelFile(m.dump(), dir).status());
}

TEST(LmModelFileTest, Gpt2ErrorsNameTheTensor) {
  const std::string dir = TempDir("gpt2_bad");
  auto tensors = Gpt2Tensors("");
  tensors.erase("h.0.mlp.c_fc.bias");
  tensors["h.0.attn.c_attn.weight"] = {8, 16};
  WriteTensors(dir + "/model.safetensors", tensors);
  EXPECT_THAT(ModelJson(dir, kGpt2Config, {{"model", -1}}),
              StatusIs(kInvalid, "'h.0.attn.c_attn.weight' in model.safetensors has shape "
                                 "[8, 16], expected [8, 24]"));
  tensors["h.0.attn.c_attn.weight"] = {8, 24};
  WriteTensors(dir + "/model.safetensors", tensors);
  EXPECT_THAT(ModelJson(dir, kGpt2Config, {{"model", -1}}),
              StatusIs(absl::StatusCode::kNotFound, "h.0.mlp.c_fc.bias"));
}

TEST(LmModelFileTest, LlamaShardedIndexAndTiedHead) {
  const std::string dir = TempDir("llama");
  std::map<std::string, std::vector<int64_t>> a = {
      {"model.embed_tokens.weight", {16, 8}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
      {"model.layers.0.self_attn.v_proj.weight", {4, 8}}};
  std::map<std::string, std::vector<int64_t>> b = {
      {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
      {"model.layers.0.post_attention_layernorm.weight", {8}},
      {"model.layers.0.mlp.gate_proj.weight", {12, 8}},
      {"model.layers.0.mlp.up_proj.weight", {12, 8}},
      {"model.layers.0.mlp.down_proj.weight", {8, 12}},
      {"model.norm.weight", {8}}};
  WriteTensors(dir + "/model-00001-of-00002.safetensors", a);
  WriteTensors(dir + "/model-00002-of-00002.safetensors", b);
  Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
  for (const auto& [name, shape] : a) index["weight_map"][name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, shape] : b) index["weight_map"][name] = "model-00002-of-00002.safetensors";
  WriteText(dir + "/model.safetensors.index.json", index.dump());
  ASSERT_OK_AND_ASSIGN(Json m, ModelJson(dir, kLlamaConfig, {{"model", -1}}));
  EXPECT_EQ(m["params"]["layers.0.self_attn.k_proj.weight"]["from"],
            "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(m["params"]["layers.0.self_attn.k_proj.weight"]["sharding"],
            Json::array({"model", nullptr}));  // [out, in]: out over model
  EXPECT_EQ(m["params"]["layers.0.mlp.down_proj.weight"]["sharding"],
            Json::array({nullptr, "model"}));
  EXPECT_EQ(m["layers"].back()["inputs"], Json::array({"final_norm", "embed_tokens.weight"}));
  EXPECT_EQ(m["checkpoint_tied"]["lm_head.weight"], "embed_tokens.weight");
  EXPECT_FALSE(m["checkpoint_tied"].contains("layers.0.mlp.up_proj.weight"));  // a param
  EXPECT_EQ(m["checkpoint_ignored"], Json::array({"layers.0.self_attn.rotary_emb.inv_freq",
                                                  "model.layers.0.self_attn.rotary_emb.inv_freq"}));
  // A weight_map entry pointing at a shard that lacks the tensor.
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  WriteText(dir + "/model.safetensors.index.json", index.dump());
  EXPECT_THAT(HfCheckpoint::Open(dir), StatusIs(kInvalid, "model.norm.weight"));
}

TEST(LmModelFileTest, MissingCheckpointSaysWhatWasLookedFor) {
  const std::string dir = TempDir("empty");
  EXPECT_THAT(HfCheckpoint::Open(dir),
              StatusIs(absl::StatusCode::kNotFound, "no model.safetensors"));
}

TEST(HfConfigTest, GenerationConfigEosIsAnIdOrAListOrAbsent) {
  ASSERT_OK_AND_ASSIGN(auto one, ParseGenerationConfigEos(R"({"eos_token_id": 7})", "g.json"));
  EXPECT_EQ(one, std::vector<int64_t>({7}));
  ASSERT_OK_AND_ASSIGN(auto two,
                       ParseGenerationConfigEos(R"({"eos_token_id": [3, 9]})", "g.json"));
  EXPECT_EQ(two, std::vector<int64_t>({3, 9}));
  ASSERT_OK_AND_ASSIGN(auto none, ParseGenerationConfigEos(R"({"eos_token_id": null})", "g"));
  EXPECT_FALSE(none.has_value());
  ASSERT_OK_AND_ASSIGN(none, ParseGenerationConfigEos(R"({"bos_token_id": 1})", "g"));
  EXPECT_FALSE(none.has_value());
  EXPECT_THAT(ParseGenerationConfigEos(R"({"eos_token_id": -2})", "g.json").status(),
              StatusIs(kInvalid, "g.json: eos_token_id -2 has -2"));
  EXPECT_THAT(ParseGenerationConfigEos("{", "g.json").status(),
              StatusIs(kInvalid, "g.json: broken JSON"));
}

TEST(ImportTest, CopiesTheTokenizerFilesAndTakesGenerationConfigsEos) {
  const std::string hf = TempDir("tok_hf"), out = TempDir("tok_out");
  WriteTensors(hf + "/model.safetensors", Gpt2Tensors("transformer."));
  WriteText(hf + "/config.json",
            R"({"architectures": ["GPT2LMHeadModel"], "n_layer": 1, "n_embd": 8, "n_head": 2,
                "vocab_size": 11, "n_positions": 6, "n_inner": null, "eos_token_id": 1})");
  WriteText(hf + "/vocab.json", R"({"a": 0})");
  WriteText(hf + "/merges.txt", "#version: 0.2\n");
  WriteText(hf + "/generation_config.json", R"({"eos_token_id": [4, 5]})");
  WriteText(hf + "/README.md", "not a tokenizer file");
  ImportOptions options;
  options.hf_dir = hf;
  options.out_dir = out;
  options.name = "tiny";
  ASSERT_OK_AND_ASSIGN(ImportResult result, ImportHfModel(options));
  EXPECT_EQ(result.config.eos_token_ids, std::vector<int64_t>({4, 5}));
  std::ifstream model_file(result.model_path);
  const Json model = Json::parse(model_file);
  EXPECT_EQ(model["generation"]["eos_token_ids"], Json::array({4, 5}));
  std::vector<std::string> copied;
  for (const auto& e : std::filesystem::directory_iterator(out + "/tiny.tokenizer")) {
    copied.push_back(e.path().filename().string());
  }
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(copied, std::vector<std::string>(
                        {"generation_config.json", "merges.txt", "vocab.json"}));
  std::ifstream vocab(out + "/tiny.tokenizer/vocab.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(vocab), {}), R"({"a": 0})");
  // Without tokenizer files: no folder.
  std::filesystem::remove(hf + "/vocab.json");
  std::filesystem::remove(hf + "/merges.txt");
  std::filesystem::remove(hf + "/generation_config.json");
  options.name = "bare";
  ASSERT_OK_AND_ASSIGN(result, ImportHfModel(options));
  EXPECT_EQ(result.config.eos_token_ids, std::vector<int64_t>({1}));
  EXPECT_FALSE(std::filesystem::exists(out + "/bare.tokenizer"));
}

}  // namespace
}  // namespace client
}  // namespace meshserve
