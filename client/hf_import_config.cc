#include "client/hf_import_config.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"

namespace meshserve {
namespace client {
namespace {

// Reads the fields of one config.json, each error prefixed with the file.
class ConfigReader {
 public:
  ConfigReader(const Json& root, absl::string_view path) : root_(root), path_(path) {}

  absl::StatusOr<int64_t> PositiveInt(absl::string_view key) const {
    MS_ASSIGN_OR_RETURN(const Json* j, RequiredJsonField(root_, key, "config"), path_);
    MS_ASSIGN_OR_RETURN(int64_t v, JsonInt(*j, key), path_);
    if (v < 1) return InvalidArgument(path_, ": ", key, " ", v, " must be >= 1");
    return v;
  }
  // An optional positive integer (null or absent: `fallback`).
  absl::StatusOr<int64_t> PositiveInt(absl::string_view key, int64_t fallback) const {
    if (FindJsonField(root_, key) == nullptr) return fallback;
    return PositiveInt(key);
  }
  absl::StatusOr<double> Number(absl::string_view key, double fallback) const {
    const Json* j = FindJsonField(root_, key);
    if (j == nullptr) return fallback;
    MS_ASSIGN_OR_RETURN(double v, JsonNumber(*j, key), path_);
    return v;
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const Json* j = FindJsonField(root_, key);
    if (j == nullptr) return fallback;
    MS_ASSIGN_OR_RETURN(bool v, JsonBool(*j, key), path_);
    return v;
  }
  absl::StatusOr<std::string> String(absl::string_view key, absl::string_view fallback) const {
    const Json* j = FindJsonField(root_, key);
    if (j == nullptr) return std::string(fallback);
    MS_ASSIGN_OR_RETURN(std::string v, JsonString(*j, key), path_);
    return v;
  }
  absl::Status Unsupported(absl::string_view key, const Json& value,
                           absl::string_view supported) const {
    return InvalidArgument(path_, ": ", key, " ", ShowJson(value), " is not supported (",
                           supported, ")");
  }
  const Json& root() const { return root_; }
  const std::string& path() const { return path_; }

 private:
  const Json& root_;
  std::string path_;
};

absl::StatusOr<std::string> Architecture(const ConfigReader& r) {
  if (const Json* archs = FindJsonField(r.root(), "architectures")) {
    MS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        JsonStringList(*archs, "architectures"), r.path());
    if (names.size() != 1) {
      return InvalidArgument(r.path(), ": architectures ", ShowJson(*archs),
                             " must name exactly one architecture");
    }
    return names[0];
  }
  MS_ASSIGN_OR_RETURN(std::string type, r.String("model_type", ""));
  if (type == "gpt2") return std::string("GPT2LMHeadModel");
  if (type == "llama") return std::string("LlamaForCausalLM");
  if (type.empty()) {
    return InvalidArgument(r.path(), ": neither architectures nor model_type is set");
  }
  return r.Unsupported("model_type", Json(type), "gpt2, llama");
}

absl::Status ReadGpt2(const ConfigReader& r, LmConfig& c) {
  MS_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("n_layer"));
  MS_ASSIGN_OR_RETURN(c.hidden, r.PositiveInt("n_embd"));
  MS_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("n_head"));
  MS_ASSIGN_OR_RETURN(c.vocab, r.PositiveInt("vocab_size"));
  MS_ASSIGN_OR_RETURN(c.max_positions, r.PositiveInt("n_positions"));
  MS_ASSIGN_OR_RETURN(c.intermediate, r.PositiveInt("n_inner", 4 * c.hidden));
  MS_ASSIGN_OR_RETURN(c.norm_epsilon, r.Number("layer_norm_epsilon", 1e-5));
  MS_ASSIGN_OR_RETURN(std::string act, r.String("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return r.Unsupported("activation_function", Json(act),
                         "gelu_new, gelu_pytorch_tanh: the tanh-approximate gelu");
  }
  MS_ASSIGN_OR_RETURN(c.scale_attn_weights, r.Bool("scale_attn_weights", true));
  MS_ASSIGN_OR_RETURN(c.scale_attn_by_inverse_layer_idx,
                      r.Bool("scale_attn_by_inverse_layer_idx", false));
  MS_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  if (c.hidden % c.num_heads != 0) {
    return InvalidArgument(r.path(), ": n_head ", c.num_heads, " does not divide n_embd ",
                           c.hidden);
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden / c.num_heads;
  return absl::OkStatus();
}

absl::Status CheckRopeScaling(const ConfigReader& r) {
  const Json* scaling = FindJsonField(r.root(), "rope_scaling");
  if (scaling == nullptr) return absl::OkStatus();
  const Json* type = FindJsonField(*scaling, "rope_type");
  if (type == nullptr) type = FindJsonField(*scaling, "type");
  if (type != nullptr && type->is_string() && type->get<std::string>() == "default") {
    return absl::OkStatus();
  }
  return r.Unsupported("rope_scaling", *scaling, "null or rope_type \"default\"");
}

absl::Status ReadLlama(const ConfigReader& r, LmConfig& c) {
  MS_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  MS_ASSIGN_OR_RETURN(c.hidden, r.PositiveInt("hidden_size"));
  MS_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  MS_ASSIGN_OR_RETURN(c.num_kv_heads, r.PositiveInt("num_key_value_heads", c.num_heads));
  MS_ASSIGN_OR_RETURN(c.intermediate, r.PositiveInt("intermediate_size"));
  MS_ASSIGN_OR_RETURN(c.vocab, r.PositiveInt("vocab_size"));
  MS_ASSIGN_OR_RETURN(c.norm_epsilon, r.Number("rms_norm_eps", 1e-6));
  MS_ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 10000.0));
  MS_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  MS_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  MS_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  MS_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") return r.Unsupported("hidden_act", Json(act), "silu");
  MS_RETURN_IF_ERROR(CheckRopeScaling(r));
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(r.path(), ": num_key_value_heads ", c.num_kv_heads,
                           " does not divide num_attention_heads ", c.num_heads);
  }
  if (FindJsonField(r.root(), "head_dim") == nullptr && c.hidden % c.num_heads != 0) {
    return InvalidArgument(r.path(), ": num_attention_heads ", c.num_heads,
                           " does not divide hidden_size ", c.hidden);
  }
  MS_ASSIGN_OR_RETURN(c.head_dim, r.PositiveInt("head_dim", c.hidden / c.num_heads));
  if (c.head_dim % 2 != 0) {
    return InvalidArgument(r.path(), ": head_dim ", c.head_dim, " must be even for RoPE");
  }
  if (c.rope_theta <= 0) {
    return InvalidArgument(r.path(), ": rope_theta ", c.rope_theta, " must be > 0");
  }
  return absl::OkStatus();
}

// eos_token_id: an id, a list of ids, or null / absent (none).
absl::StatusOr<std::vector<int64_t>> EosTokenIds(const ConfigReader& r) {
  const Json* eos = FindJsonField(r.root(), "eos_token_id");
  if (eos == nullptr || eos->is_null()) return std::vector<int64_t>{};
  std::vector<int64_t> ids;
  if (eos->is_number_integer()) {
    ids.push_back(eos->get<int64_t>());
  } else {
    MS_ASSIGN_OR_RETURN(ids, JsonIntList(*eos, "eos_token_id"), r.path());
  }
  for (int64_t id : ids) {
    if (id < 0) return InvalidArgument(r.path(), ": eos_token_id ", ShowJson(*eos), " has ", id);
  }
  return ids;
}

}  // namespace

std::string LmConfig::ToString() const {
  std::string out = absl::StrCat(architecture, ": ", num_layers, " layers, d=", hidden, ", ",
                                 num_heads, " heads (", head_dim, " each)");
  if (num_kv_heads != num_heads) absl::StrAppend(&out, ", ", num_kv_heads, " kv heads");
  absl::StrAppend(&out, ", mlp ", intermediate, ", vocab ", vocab);
  if (max_positions > 0) absl::StrAppend(&out, ", ", max_positions, " positions");
  if (arch == LmArch::kLlama) absl::StrAppend(&out, ", rope_theta ", rope_theta);
  absl::StrAppend(&out, tie_word_embeddings ? ", tied embeddings" : "");
  return out;
}

absl::StatusOr<LmConfig> ParseHfConfig(absl::string_view json_text, absl::string_view path) {
  absl::StatusOr<Json> root = ParseJsonText(json_text);
  if (!root.ok()) return InvalidArgument(path, ": broken JSON: ", root.status().message());
  if (!root->is_object()) {
    return InvalidArgument(path, ": must be a JSON object, got ", ShowJson(*root));
  }
  ConfigReader r(*root, path);
  LmConfig c;
  MS_ASSIGN_OR_RETURN(c.architecture, Architecture(r));
  MS_ASSIGN_OR_RETURN(c.initializer_range, r.Number("initializer_range", 0.02));
  if (c.architecture == "GPT2LMHeadModel") {
    c.arch = LmArch::kGpt2;
    MS_RETURN_IF_ERROR(ReadGpt2(r, c));
  } else if (c.architecture == "LlamaForCausalLM") {
    c.arch = LmArch::kLlama;
    MS_RETURN_IF_ERROR(ReadLlama(r, c));
  } else {
    return r.Unsupported("architectures[0]", Json(c.architecture),
                         "GPT2LMHeadModel, LlamaForCausalLM");
  }
  if (c.arch == LmArch::kGpt2) {
    c.context_length = c.max_positions;
  } else {
    MS_ASSIGN_OR_RETURN(c.context_length, r.PositiveInt("max_position_embeddings", 2048));
  }
  MS_ASSIGN_OR_RETURN(c.eos_token_ids, EosTokenIds(r));
  return c;
}

absl::StatusOr<std::optional<std::vector<int64_t>>> ParseGenerationConfigEos(
    absl::string_view json_text, absl::string_view path) {
  absl::StatusOr<Json> root = ParseJsonText(json_text);
  if (!root.ok()) return InvalidArgument(path, ": broken JSON: ", root.status().message());
  if (!root->is_object()) {
    return InvalidArgument(path, ": must be a JSON object, got ", ShowJson(*root));
  }
  const Json* eos = FindJsonField(*root, "eos_token_id");
  if (eos == nullptr || eos->is_null()) return std::optional<std::vector<int64_t>>();
  ConfigReader r(*root, path);
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> ids, EosTokenIds(r));
  return std::optional<std::vector<int64_t>>(std::move(ids));
}

}  // namespace client
}  // namespace meshserve
