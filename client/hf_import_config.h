// The Hugging Face `config.json` of a causal language model, as the importer
// (hf_import.h) needs it: GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM).
//
// Fields read, with Hugging Face's defaults where the file may omit them:
//   GPT-2: n_layer, n_embd, n_head, vocab_size, n_positions,
//          n_inner (null: 4 * n_embd), layer_norm_epsilon (1e-5),
//          activation_function (gelu_new; gelu_pytorch_tanh also accepted:
//          both are the tanh approximation that the `gelu` op computes),
//          scale_attn_weights (true), scale_attn_by_inverse_layer_idx (false),
//          tie_word_embeddings (true), initializer_range (0.02).
//   Llama: num_hidden_layers, hidden_size, num_attention_heads,
//          num_key_value_heads (num_attention_heads), intermediate_size,
//          vocab_size, head_dim (hidden_size / num_attention_heads),
//          rms_norm_eps (1e-6), rope_theta (10000), rope_scaling (null or
//          rope_type "default"), hidden_act (silu), attention_bias (false),
//          mlp_bias (false), tie_word_embeddings (false),
//          initializer_range (0.02).
// The architecture comes from `architectures[0]`, else `model_type`.
//
// Errors are kInvalidArgument and name the file, the field and the value:
//   "config.json: architectures[0] 'BertForMaskedLM' is not supported
//    (GPT2LMHeadModel, LlamaForCausalLM)",
//   "config.json: rope_scaling {\"rope_type\":\"llama3\",...} is not supported",
//   "config.json: n_head 5 does not divide n_embd 768".
//
// Thread-safety: plain values and pure functions.
#ifndef MESHSERVE_CLIENT_HF_IMPORT_CONFIG_H_
#define MESHSERVE_CLIENT_HF_IMPORT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {
namespace client {

enum class LmArch { kGpt2, kLlama };

struct LmConfig {
  LmArch arch = LmArch::kGpt2;
  std::string architecture;  // as written: "GPT2LMHeadModel"
  int64_t num_layers = 0;
  int64_t hidden = 0;         // d_model
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;   // == num_heads for GPT-2
  int64_t head_dim = 0;
  int64_t intermediate = 0;   // MLP width
  int64_t vocab = 0;
  int64_t max_positions = 0;  // GPT-2's wpe rows (0 for Llama: RoPE)
  double norm_epsilon = 1e-5;
  double rope_theta = 10000.0;
  bool scale_attn_weights = true;           // GPT-2
  bool scale_attn_by_inverse_layer_idx = false;  // GPT-2
  bool attention_bias = false;  // Llama q/k/v/o biases (GPT-2 always has them)
  bool mlp_bias = false;        // Llama gate/up/down biases
  bool tie_word_embeddings = true;
  double initializer_range = 0.02;
  // Generation: the positions a sequence may use (GPT-2's n_positions,
  // Llama's max_position_embeddings) and the eos ids (eos_token_id).
  int64_t context_length = 0;
  std::vector<int64_t> eos_token_ids;

  // "GPT2LMHeadModel: 12 layers, d=768, 12 heads (64 each), mlp 3072, vocab 50257"
  std::string ToString() const;
};

// Parses the text of config.json; `path` names the file in errors.
absl::StatusOr<LmConfig> ParseHfConfig(absl::string_view json_text, absl::string_view path);

// The eos ids of a generation_config.json (its eos_token_id: an id or a list);
// nullopt when the field is absent or null (config.json's then stand).
// \error kInvalidArgument naming `path` for broken JSON or a bad eos_token_id.
absl::StatusOr<std::optional<std::vector<int64_t>>> ParseGenerationConfigEos(
    absl::string_view json_text, absl::string_view path);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_HF_IMPORT_CONFIG_H_
