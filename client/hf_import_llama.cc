// BuildLlamaModel (hf_import_graph.h): LlamaForCausalLM as a model file.
//
// Checkpoint names (the `model.` prefix optional, lm_head never prefixed):
// embed_tokens.weight [V, d], layers.N.input_layernorm.weight [d],
// layers.N.self_attn.{q_proj [H*hd, d], k_proj [KV*hd, d], v_proj [KV*hd, d],
// o_proj [d, H*hd]}.weight (nn.Linear: [out, in]; .bias with
// attention_bias), layers.N.post_attention_layernorm.weight,
// layers.N.mlp.{gate_proj [I, d], up_proj [I, d], down_proj [d, I]}.weight
// (.bias with mlp_bias), norm.weight, lm_head.weight [V, d] (absent: tied
// to embed_tokens). [out, in] weights are used as they are, through
// einsum "bsi,oi->bso".
//
// Attention with grouped-query heads: q -> [b, s, H, hd], k, v -> [b, s, KV,
// hd]; RoPE on q and k (rotate_half, rope_theta); causal attention scaled by
// 1/sqrt(hd) with query head h reading kv head h / (H / KV), as HF's
// repeat_kv (the `attention` op) -> [b, s, H*hd].
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/hf_import_graph.h"
#include "common/base/status_macros.h"

namespace meshserve {
namespace client {
namespace {

// An nn.Linear [out, in] (+ bias [out]) applied as einsum "bsi,oi->bso";
// `column` shards out over `model` (else in, and the result replicates d).
absl::Status HfLinear(LmModelBuilder& b, const std::string& layer, const std::string& input,
                      const std::string& tensor, int64_t in, int64_t out, bool column,
                      bool sharded, bool bias) {
  const Json axis = b.ModelAxis(sharded);
  Json spec = column ? Json::array({axis, nullptr}) : Json::array({nullptr, axis});
  MS_RETURN_IF_ERROR(b.Param(tensor + ".weight", {out, in}, spec,
                             {tensor + ".weight", {out, in}, {}},
                             {"normal", b.config().initializer_range}));
  Json fields = {{"equation", "bsi,oi->bso"}, {"inputs", {input, tensor + ".weight"}}};
  if (bias) {
    MS_RETURN_IF_ERROR(b.Param(tensor + ".bias", {out},
                               Json::array({column ? axis : Json(nullptr)}),
                               {tensor + ".bias", {out}, {}}, {"zeros"}));
    fields["bias"] = tensor + ".bias";
  }
  if (!column && sharded) fields["out_sharding"] = Json::array({b.BatchAxis(), nullptr, nullptr});
  b.Layer(layer, "einsum", std::move(fields));
  return absl::OkStatus();
}

absl::Status RmsNorm(LmModelBuilder& b, const std::string& layer, const std::string& tensor,
                     const std::string& input) {
  const int64_t d = b.config().hidden;
  MS_RETURN_IF_ERROR(b.Param(tensor, {d}, Json::array({nullptr}), {tensor, {d}, {}}, {"ones"}));
  b.Layer(layer, "rms_norm",
          {{"input", input}, {"scale", tensor}, {"epsilon", b.config().norm_epsilon}});
  return absl::OkStatus();
}

absl::Status Attention(LmModelBuilder& b, const std::string& p, const std::string& input) {
  const LmConfig& c = b.config();
  const int64_t d = c.hidden, hd = c.head_dim, kv = c.num_kv_heads;
  const bool sharded = b.plan().attn, bias = c.attention_bias;
  const std::string a = p + "self_attn.";
  b.Buffer(a + "rotary_emb.inv_freq");  // older checkpoints' RoPE buffer: not a param
  MS_RETURN_IF_ERROR(HfLinear(b, a + "q", input, a + "q_proj", d, c.num_heads * hd, true,
                              sharded, bias));
  MS_RETURN_IF_ERROR(HfLinear(b, a + "k", input, a + "k_proj", d, kv * hd, true, sharded, bias));
  MS_RETURN_IF_ERROR(HfLinear(b, a + "v", input, a + "v_proj", d, kv * hd, true, sharded, bias));
  b.Layer(a + "q_heads", "reshape", {{"input", a + "q"}, {"shape", {0, 0, c.num_heads, hd}}});
  b.Layer(a + "k_heads", "reshape", {{"input", a + "k"}, {"shape", {0, 0, kv, hd}}});
  b.Layer(a + "v_heads", "reshape", {{"input", a + "v"}, {"shape", {0, 0, kv, hd}}});
  for (const char* t : {"q", "k"}) {
    b.Layer(absl::StrCat(a, t, "_rope"), "rope",
            {{"input", absl::StrCat(a, t, "_heads")}, {"theta", c.rope_theta}, {"seq_axis", 1}});
  }
  b.Layer(a + "context", "attention",
          {{"inputs", {a + "q_rope", a + "k_rope", a + "v_heads"}},
           {"scale", 1.0 / std::sqrt(static_cast<double>(hd))}});
  b.Layer(a + "context_flat", "reshape",
          {{"input", a + "context"}, {"shape", {0, 0, c.num_heads * hd}}});
  return HfLinear(b, a + "out", a + "context_flat", a + "o_proj", c.num_heads * hd, d, false,
                  sharded, bias);
}

absl::StatusOr<std::string> LlamaBlock(LmModelBuilder& b, int64_t i, const std::string& x) {
  const LmConfig& c = b.config();
  const std::string p = absl::StrCat("layers.", i, ".");
  const bool sharded = b.plan().mlp, bias = c.mlp_bias;
  MS_RETURN_IF_ERROR(RmsNorm(b, p + "attn_norm", p + "input_layernorm.weight", x));
  MS_RETURN_IF_ERROR(Attention(b, p, p + "attn_norm"));
  b.Layer(p + "attn_residual", "add", {{"inputs", {x, p + "self_attn.out"}}});
  MS_RETURN_IF_ERROR(
      RmsNorm(b, p + "mlp_norm", p + "post_attention_layernorm.weight", p + "attn_residual"));
  const std::string m = p + "mlp.";
  MS_RETURN_IF_ERROR(HfLinear(b, m + "gate", p + "mlp_norm", m + "gate_proj", c.hidden,
                              c.intermediate, true, sharded, bias));
  MS_RETURN_IF_ERROR(HfLinear(b, m + "up", p + "mlp_norm", m + "up_proj", c.hidden,
                              c.intermediate, true, sharded, bias));
  b.Layer(m + "act", "silu", {{"input", m + "gate"}});
  b.Layer(m + "hidden", "mul", {{"inputs", {m + "act", m + "up"}}});
  MS_RETURN_IF_ERROR(HfLinear(b, m + "out", m + "hidden", m + "down_proj", c.intermediate,
                              c.hidden, false, sharded, bias));
  b.Layer(p + "out", "add", {{"inputs", {p + "attn_residual", m + "out"}}});
  return p + "out";
}

}  // namespace

absl::Status BuildLlamaModel(LmModelBuilder& b) {
  const LmConfig& c = b.config();
  MS_RETURN_IF_ERROR(b.TokenEmbedding("embed", "embed_tokens.weight"));
  std::string x = "embed";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    MS_ASSIGN_OR_RETURN(x, LlamaBlock(b, i, x));
  }
  MS_RETURN_IF_ERROR(RmsNorm(b, "final_norm", "norm.weight", x));
  return b.LmHead("final_norm", "embed_tokens.weight");
}

}  // namespace client
}  // namespace meshserve
