// BuildGpt2Model (hf_import_graph.h): GPT2LMHeadModel as a model file.
//
// Checkpoint names (the `transformer.` prefix optional): wte.weight [V, d],
// wpe.weight [P, d], h.N.ln_1.{weight,bias} [d], h.N.attn.c_attn.weight
// [d, 3d] (Conv1D: [in, out], q|k|v column blocks) and .bias [3d],
// h.N.attn.c_proj.{weight [d, d], bias}, h.N.ln_2, h.N.mlp.c_fc.{weight [d, f],
// bias [f]}, h.N.mlp.c_proj.{weight [f, d], bias [d]}, ln_f, and optionally
// lm_head.weight [V, d] (nn.Linear: [out, in]); without it the head is tied to
// wte. Conv1D kernels are [in, out] like `linear`'s, so they are used as they
// are; the fused c_attn becomes three params reading its column boxes.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/hf_import_graph.h"
#include "common/base/status_macros.h"

namespace meshserve {
namespace client {
namespace {

const ParamInit kOnes{"ones"};
const ParamInit kZeros{"zeros"};

// The whole checkpoint tensor `name` of `shape`.
ParamSource Whole(const std::string& name, std::vector<int64_t> shape) {
  return ParamSource{name, std::move(shape), {}};
}

// ln_1 / ln_2 / ln_f: weight and bias [d], replicated, and the layer.
absl::Status LayerNorm(LmModelBuilder& b, const std::string& name, const std::string& input) {
  const int64_t d = b.config().hidden;
  MS_RETURN_IF_ERROR(b.Param(name + ".weight", {d}, Json::array({nullptr}),
                             Whole(name + ".weight", {d}), kOnes));
  MS_RETURN_IF_ERROR(b.Param(name + ".bias", {d}, Json::array({nullptr}),
                             Whole(name + ".bias", {d}), kZeros));
  b.Layer(name, "layer_norm",
          {{"input", input}, {"scale", name + ".weight"}, {"bias", name + ".bias"},
           {"epsilon", b.config().norm_epsilon}});
  return absl::OkStatus();
}

// A Conv1D [in, out] + bias [out] as `linear`; `column` shards out (else in).
// `reduce`: the result's out_sharding replicates d (a row-sharded product).
absl::Status Conv1D(LmModelBuilder& b, const std::string& layer, const std::string& input,
                    const std::string& tensor, int64_t in, int64_t out, bool column,
                    bool sharded, double stddev) {
  Json axis = b.ModelAxis(sharded);
  Json kernel_spec = column ? Json::array({nullptr, axis}) : Json::array({axis, nullptr});
  Json bias_spec = Json::array({column ? axis : Json(nullptr)});
  MS_RETURN_IF_ERROR(b.Param(tensor + ".weight", {in, out}, kernel_spec,
                             Whole(tensor + ".weight", {in, out}), {"normal", stddev}));
  MS_RETURN_IF_ERROR(
      b.Param(tensor + ".bias", {out}, bias_spec, Whole(tensor + ".bias", {out}), kZeros));
  Json fields = {{"input", input}, {"kernel", tensor + ".weight"}, {"bias", tensor + ".bias"}};
  if (!column && sharded) fields["out_sharding"] = Json::array({b.BatchAxis(), nullptr, nullptr});
  b.Layer(layer, "linear", std::move(fields));
  return absl::OkStatus();
}

// q, k, v: column boxes j*d of c_attn, each [b, s, d] -> [b, s, h, hd].
absl::Status QkvFromCAttn(LmModelBuilder& b, const std::string& p, const std::string& input) {
  const LmConfig& c = b.config();
  const int64_t d = c.hidden;
  const Json axis = b.ModelAxis(b.plan().attn);
  const char* names[] = {"q", "k", "v"};
  for (int64_t j = 0; j < 3; ++j) {
    const std::string param = absl::StrCat(p, "attn.", names[j]);
    MS_RETURN_IF_ERROR(b.Param(param + ".weight", {d, d}, Json::array({nullptr, axis}),
                               {p + "attn.c_attn.weight", {d, 3 * d}, {0, j * d}},
                               {"normal", c.initializer_range}));
    MS_RETURN_IF_ERROR(b.Param(param + ".bias", {d}, Json::array({axis}),
                               {p + "attn.c_attn.bias", {3 * d}, {j * d}}, kZeros));
    b.Layer(param, "linear",
            {{"input", input}, {"kernel", param + ".weight"}, {"bias", param + ".bias"}});
    b.Layer(param + "_heads", "reshape",
            {{"input", param}, {"shape", {0, 0, c.num_heads, c.head_dim}}});
  }
  return absl::OkStatus();
}

// Block `i`: x -> x + attn(ln_1(x)) -> + mlp(ln_2(.)); returns the output's name.
absl::StatusOr<std::string> Gpt2Block(LmModelBuilder& b, int64_t i, const std::string& x) {
  const LmConfig& c = b.config();
  const std::string p = absl::StrCat("h.", i, ".");
  const double proj_stddev = c.initializer_range / std::sqrt(2.0 * c.num_layers);
  b.Buffer(p + "attn.bias");  // the causal mask buffers: not params
  b.Buffer(p + "attn.masked_bias");
  MS_RETURN_IF_ERROR(LayerNorm(b, p + "ln_1", x));
  MS_RETURN_IF_ERROR(QkvFromCAttn(b, p, p + "ln_1"));
  double scale = c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(c.head_dim)) : 1.0;
  if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(i + 1);
  // jax.nn.dot_product_attention(q, k, v, is_causal=True, scale=scale): the
  // workers keep its keys and values per sequence when generating.
  b.Layer(p + "attn.context", "attention",
          {{"inputs", {p + "attn.q_heads", p + "attn.k_heads", p + "attn.v_heads"}},
           {"scale", scale}});
  b.Layer(p + "attn.context_flat", "reshape",
          {{"input", p + "attn.context"}, {"shape", {0, 0, c.hidden}}});
  MS_RETURN_IF_ERROR(Conv1D(b, p + "attn.out", p + "attn.context_flat", p + "attn.c_proj",
                            c.hidden, c.hidden, false, b.plan().attn, proj_stddev));
  b.Layer(p + "attn_residual", "add", {{"inputs", {x, p + "attn.out"}}});
  MS_RETURN_IF_ERROR(LayerNorm(b, p + "ln_2", p + "attn_residual"));
  MS_RETURN_IF_ERROR(Conv1D(b, p + "mlp.fc", p + "ln_2", p + "mlp.c_fc", c.hidden,
                            c.intermediate, true, b.plan().mlp, c.initializer_range));
  b.Layer(p + "mlp.act", "gelu", {{"input", p + "mlp.fc"}});
  MS_RETURN_IF_ERROR(Conv1D(b, p + "mlp.out", p + "mlp.act", p + "mlp.c_proj", c.intermediate,
                            c.hidden, false, b.plan().mlp, proj_stddev));
  b.Layer(p + "out", "add", {{"inputs", {p + "attn_residual", p + "mlp.out"}}});
  return p + "out";
}

}  // namespace

absl::Status BuildGpt2Model(LmModelBuilder& b) {
  const LmConfig& c = b.config();
  MS_RETURN_IF_ERROR(b.TokenEmbedding("token_embed", "wte.weight"));
  MS_RETURN_IF_ERROR(b.Param("wpe.weight", {c.max_positions, c.hidden},
                             Json::array({nullptr, nullptr}),
                             Whole("wpe.weight", {c.max_positions, c.hidden}),
                             {"normal", c.initializer_range}));
  b.Layer("positions", "positions", {{"input", "input_ids"}, {"axis", -1}});
  b.Layer("position_embed", "embed", {{"input", "positions"}, {"table", "wpe.weight"}});
  b.Layer("embed", "add", {{"inputs", {"token_embed", "position_embed"}}});
  std::string x = "embed";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    MS_ASSIGN_OR_RETURN(x, Gpt2Block(b, i, x));
  }
  MS_RETURN_IF_ERROR(LayerNorm(b, "ln_f", x));
  return b.LmHead("ln_f", "wte.weight");
}

}  // namespace client
}  // namespace meshserve
