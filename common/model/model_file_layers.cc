// The "layers" field of the model file (model_file.h): each layer's operands
// and its op's fields. Errors are kInvalidArgument; ParseLayers prefixes them
// with the layer ("layer 'p': softmax scale ...") and ParseModelFile with the
// model.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/model_file_internal.h"

namespace meshserve {
namespace model_file_internal {
namespace {

using Names = absl::flat_hash_set<std::string>;

// Reads the param-name field `key` of a layer; `required` ops must have it.
absl::Status GetParamRef(const Json& j, absl::string_view key, bool required,
                         const ModelFile& m, std::string& out) {
  if (!j.contains(std::string(key))) {
    if (required) return InvalidArgument("missing '", key, "'");
    return absl::OkStatus();
  }
  MS_ASSIGN_OR_RETURN(out, JsonString(j[std::string(key)], key));
  if (m.FindParam(out) == nullptr) {
    return InvalidArgument(key, " '", out, "' is not a param");
  }
  return absl::OkStatus();
}

absl::Status ParseLayerOperands(const Json& j, LayerDef& l) {
  if (ModelOpArityOf(l.kind) == ModelOpArity::kUnary) {
    if (j.contains("inputs")) {
      return InvalidArgument("op '", ModelOpName(l.kind), "' takes one 'input', not 'inputs'");
    }
    if (!j.contains("input")) return InvalidArgument("missing 'input'");
    MS_ASSIGN_OR_RETURN(std::string in, JsonString(j["input"], "input"));
    l.inputs.push_back(std::move(in));
    return absl::OkStatus();
  }
  const size_t n = ModelOpArityOf(l.kind) == ModelOpArity::kBinary ? 2 : 3;
  const char* count = n == 2 ? "two" : "three";
  if (j.contains("input")) {
    return InvalidArgument("op '", ModelOpName(l.kind), "' takes ", count, " 'inputs', not 'input'");
  }
  if (!j.contains("inputs")) return InvalidArgument("missing 'inputs'");
  const Json& ins = j["inputs"];
  if (!ins.is_array() || ins.size() != n) {
    return InvalidArgument("op '", ModelOpName(l.kind), "' needs 'inputs' with ", count,
                           " names, got ", ShowJson(ins));
  }
  for (const Json& name : ins) {
    MS_ASSIGN_OR_RETURN(std::string in, JsonString(name, "inputs"));
    l.inputs.push_back(std::move(in));
  }
  return absl::OkStatus();
}

// attention: "scale" (> 0; absent: 1 / sqrt(head_dim)) and "causal" (only
// true: the op is jax.nn.dot_product_attention(..., is_causal=True)).
absl::Status ParseAttentionFields(const Json& j, LayerDef& l) {
  if (j.contains("scale")) {
    MS_ASSIGN_OR_RETURN(l.attention_scale, JsonNumber(j["scale"], "attention scale"));
    if (!std::isfinite(l.attention_scale) || !(l.attention_scale > 0)) {
      return InvalidArgument("attention scale ", ShowJson(j["scale"]),
                             " must be a finite number > 0");
    }
  }
  l.causal = true;
  if (j.contains("causal")) {
    MS_ASSIGN_OR_RETURN(bool causal, JsonBool(j["causal"], "causal"));
    if (!causal) return InvalidArgument("attention: only causal attention is supported");
  }
  return absl::OkStatus();
}

// select_rows "rows" and sample "vocab_size": integers >= 1.
absl::Status ParsePositiveField(const Json& j, const char* key, int64_t& out) {
  if (!j.contains(key)) return InvalidArgument("missing '", key, "'");
  MS_ASSIGN_OR_RETURN(out, JsonInt(j[key], key));
  if (out < 1) return InvalidArgument(key, " ", out, " must be >= 1");
  return absl::OkStatus();
}

// reshape's "shape": dims >= 1, any number of 0 (copy the input's dim at the
// same position, as ONNX Reshape) and at most one -1.
absl::Status ParseReshapeShape(const Json& j, LayerDef& l) {
  if (!j.contains("shape")) return InvalidArgument("missing 'shape'");
  MS_ASSIGN_OR_RETURN(l.shape, JsonIntList(j["shape"], "shape"));
  int minus = 0;
  for (size_t i = 0; i < l.shape.size(); ++i) {
    const int64_t d = l.shape[i];
    if (d < -1) {
      return InvalidArgument("shape ", ShowJson(j["shape"]), ": dim ", i, " is ", d,
                             " (must be >= 1, 0 to copy the input's dim, or -1)");
    }
    minus += (d == -1);
  }
  if (minus > 1) return InvalidArgument("shape ", ShowJson(j["shape"]), " has more than one -1");
  return absl::OkStatus();
}

absl::Status ParsePerm(const Json& j, LayerDef& l) {
  if (!j.contains("perm")) return InvalidArgument("missing 'perm'");
  MS_ASSIGN_OR_RETURN(l.perm, JsonIntList(j["perm"], "perm"));
  std::vector<bool> seen(l.perm.size(), false);
  for (int64_t v : l.perm) {
    if (v < 0 || v >= static_cast<int64_t>(seen.size()) || seen[v]) {
      return InvalidArgument("perm ", ShowJson(j["perm"]), " is not a permutation");
    }
    seen[v] = true;
  }
  return absl::OkStatus();
}

// softmax: "axis", "scale" (a number here), "causal", "where".
absl::Status ParseSoftmaxFields(const Json& j, const ModelFile& m, const Names& defined,
                                LayerDef& l) {
  if (j.contains("axis")) {
    MS_ASSIGN_OR_RETURN(l.axis, JsonInt(j["axis"], "axis"));
  }
  if (j.contains("scale")) {
    MS_ASSIGN_OR_RETURN(l.softmax_scale, JsonNumber(j["scale"], "softmax scale"));
    if (!std::isfinite(l.softmax_scale) || l.softmax_scale == 0) {
      return InvalidArgument("softmax scale ", ShowJson(j["scale"]),
                             " must be a finite non-zero number");
    }
  }
  if (j.contains("causal")) {
    MS_ASSIGN_OR_RETURN(l.causal, JsonBool(j["causal"], "causal"));
  }
  if (j.contains("where")) {
    MS_ASSIGN_OR_RETURN(l.where, JsonString(j["where"], "where"));
    if (!defined.contains(l.where) && m.FindParam(l.where) == nullptr) {
      return InvalidArgument("where '", l.where,
                             "' is not an input, a param or an earlier layer");
    }
  }
  return absl::OkStatus();
}

// rope: "theta" (> 0, default 10000) and "seq_axis" (default 1).
absl::Status ParseRopeFields(const Json& j, LayerDef& l) {
  if (j.contains("theta")) {
    MS_ASSIGN_OR_RETURN(l.theta, JsonNumber(j["theta"], "theta"));
    if (!std::isfinite(l.theta) || !(l.theta > 0)) {
      return InvalidArgument("rope theta ", ShowJson(j["theta"]), " must be a finite number > 0");
    }
  }
  if (j.contains("seq_axis")) {
    MS_ASSIGN_OR_RETURN(l.seq_axis, JsonInt(j["seq_axis"], "seq_axis"));
  }
  return absl::OkStatus();
}

absl::Status ParseEinsumEquationField(const Json& j, LayerDef& l) {
  if (!j.contains("equation")) return InvalidArgument("missing 'equation'");
  MS_ASSIGN_OR_RETURN(l.equation, JsonString(j["equation"], "equation"));
  if (l.equation.find("->") == std::string::npos || l.equation.find(',') == std::string::npos) {
    return InvalidArgument("equation '", l.equation,
                           "' must have the form 'ab,bc->ac' (two operands and '->')");
  }
  return absl::OkStatus();
}

// The op-specific fields of one layer.
absl::Status ParseLayerFields(const Json& j, const ModelFile& m, const Names& defined,
                              LayerDef& l) {
  const ModelOp op = l.kind;
  const bool is_norm = op == ModelOp::kRmsNorm || op == ModelOp::kLayerNorm;
  MS_RETURN_IF_ERROR(GetParamRef(j, "kernel", op == ModelOp::kLinear, m, l.kernel));
  MS_RETURN_IF_ERROR(GetParamRef(j, "bias", op == ModelOp::kLayerNorm, m, l.bias));
  if (op != ModelOp::kSoftmax && op != ModelOp::kAttention) {
    MS_RETURN_IF_ERROR(GetParamRef(j, "scale", is_norm, m, l.scale));
  }
  MS_RETURN_IF_ERROR(GetParamRef(j, "table", op == ModelOp::kEmbed, m, l.table));
  switch (op) {
    case ModelOp::kEinsum: return ParseEinsumEquationField(j, l);
    case ModelOp::kSoftmax: return ParseSoftmaxFields(j, m, defined, l);
    case ModelOp::kPositions:
      if (j.contains("axis")) {
        MS_ASSIGN_OR_RETURN(l.axis, JsonInt(j["axis"], "axis"));
      }
      return absl::OkStatus();
    case ModelOp::kRope: return ParseRopeFields(j, l);
    case ModelOp::kReshape: return ParseReshapeShape(j, l);
    case ModelOp::kTranspose: return ParsePerm(j, l);
    case ModelOp::kAttention: return ParseAttentionFields(j, l);
    case ModelOp::kSelectRows: return ParsePositiveField(j, "rows", l.rows);
    case ModelOp::kSample: return ParsePositiveField(j, "vocab_size", l.vocab_size);
    default: break;
  }
  if (is_norm && j.contains("epsilon")) {
    MS_ASSIGN_OR_RETURN(l.epsilon, JsonNumber(j["epsilon"], "epsilon"));
    if (!(l.epsilon >= 0)) return InvalidArgument("epsilon ", l.epsilon, " must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerDef> ParseLayer(const Json& j, const ModelFile& m, const Names& defined) {
  LayerDef l;
  MS_ASSIGN_OR_RETURN(l.name, JsonString(j["name"], "name"));
  if (l.name.empty()) return InvalidArgument("name must not be empty");
  MS_RETURN_IF_ERROR(CheckJsonKeys(j, {"name", "op", "input", "inputs", "kernel", "bias", "scale",
                                       "table", "equation", "axis", "perm", "shape", "epsilon",
                                       "causal", "where", "theta", "seq_axis", "out_sharding",
                                       "auto_axes", "rows", "vocab_size"},
                                   "layer"));
  if (!j.contains("op")) return InvalidArgument("missing 'op'");
  MS_ASSIGN_OR_RETURN(std::string op, JsonString(j["op"], "op"));
  std::optional<ModelOp> kind = ModelOpFromName(op);
  if (!kind.has_value()) return InvalidArgument("unknown op '", op, "'");
  l.kind = *kind;
  MS_RETURN_IF_ERROR(ParseLayerOperands(j, l));
  for (const std::string& in : l.inputs) {
    if (!defined.contains(in) && m.FindParam(in) == nullptr) {
      return InvalidArgument("operand '", in,
                             "' is not an input, a param or an earlier layer");
    }
  }
  MS_RETURN_IF_ERROR(ParseLayerFields(j, m, defined, l));
  if (j.contains("out_sharding")) {
    MS_ASSIGN_OR_RETURN(l.out_sharding, GetSpec(j["out_sharding"], m, "out_sharding", true));
  }
  if (j.contains("auto_axes")) {
    MS_ASSIGN_OR_RETURN(l.auto_axes, JsonBool(j["auto_axes"], "auto_axes"));
  }
  if (l.auto_axes && !l.out_sharding.has_value()) {
    return InvalidArgument("auto_axes requires out_sharding");
  }
  if (l.kind == ModelOp::kReshard && !l.out_sharding.has_value()) {
    return InvalidArgument("op 'reshard' requires out_sharding");
  }
  return l;
}

}  // namespace

absl::Status ParseLayers(const Json& root, ModelFile& m) {
  if (!root.contains("layers")) return InvalidArgument("missing field 'layers'");
  const Json& layers = root["layers"];
  if (!layers.is_array() || layers.empty()) {
    return InvalidArgument("layers must be a non-empty list, got ", ShowJson(layers));
  }
  Names defined;
  for (const InputDef& in : m.inputs) defined.insert(in.name);
  for (const Json& j : layers) {
    if (!j.is_object() || !j.contains("name")) {
      return InvalidArgument("layer ", m.layers.size(), " must be an object with a 'name', got ",
                             ShowJson(j));
    }
    std::string label = j["name"].is_string()
                            ? absl::StrCat("layer '", j["name"].get<std::string>(), "'")
                            : absl::StrCat("layer ", m.layers.size());
    MS_ASSIGN_OR_RETURN(LayerDef l, ParseLayer(j, m, defined), label);
    if (defined.contains(l.name) || m.FindParam(l.name) != nullptr) {
      return InvalidArgument(label, ": name '", l.name,
                             "' is already used by an input, a param or a layer");
    }
    defined.insert(l.name);
    m.layers.push_back(std::move(l));
  }
  return absl::OkStatus();
}

}  // namespace model_file_internal
}  // namespace meshserve
