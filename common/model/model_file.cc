// Parsing and structural validation of the model file (model-format.md).
//
// The JSON is read with nlohmann::ordered_json so that the mesh axes keep the
// order the user wrote (the first axis is major). Every error is
// kInvalidArgument (kNotFound for an unreadable file) and its message starts
// with "model '<name>': " followed by the field path and the offending value.
#include "common/model/model_file.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using Json = nlohmann::ordered_json;

// Short rendering of a JSON value for error messages.
std::string Show(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

absl::StatusOr<int64_t> GetInt(const Json& j, absl::string_view what) {
  if (!j.is_number_integer()) {
    return InvalidArgument(what, " must be an integer, got ", Show(j));
  }
  return j.get<int64_t>();
}

absl::StatusOr<double> GetNumber(const Json& j, absl::string_view what) {
  if (!j.is_number()) return InvalidArgument(what, " must be a number, got ", Show(j));
  return j.get<double>();
}

absl::StatusOr<std::string> GetString(const Json& j, absl::string_view what) {
  if (!j.is_string()) return InvalidArgument(what, " must be a string, got ", Show(j));
  return j.get<std::string>();
}

// A list of integers; each >= 1, or -1 where `allow_minus_one`.
absl::StatusOr<std::vector<int64_t>> GetShape(const Json& j, absl::string_view what,
                                              bool allow_minus_one) {
  if (!j.is_array()) return InvalidArgument(what, " must be a list of ints, got ", Show(j));
  std::vector<int64_t> shape;
  for (const Json& d : j) {
    MS_ASSIGN_OR_RETURN(int64_t v, GetInt(d, what));
    if (v < 1 && !(allow_minus_one && v == -1)) {
      return InvalidArgument(what, " ", Show(j), ": dim ", shape.size(), " is ", v,
                             allow_minus_one ? " (must be >= 1 or -1)" : " (must be >= 1)");
    }
    shape.push_back(v);
  }
  return shape;
}

// Checks that every axis name is in the mesh and appears at most once.
absl::Status CheckSpecAxes(const PartitionSpec& spec, const ModelFile& model,
                           absl::string_view what, const std::string& text) {
  absl::flat_hash_set<std::string> seen;
  auto check = [&](const std::string& axis) -> absl::Status {
    bool known = false;
    for (const auto& [name, size] : model.mesh_axes) known |= (name == axis);
    if (!known) {
      std::vector<std::string> names;
      for (const auto& a : model.mesh_axes) names.push_back(a.first);
      return InvalidArgument(what, " ", text, ": axis '", axis, "' is not in the mesh (",
                             absl::StrJoin(names, ", "), ")");
    }
    if (!seen.insert(axis).second) {
      return InvalidArgument(what, " ", text, ": axis '", axis, "' is used twice");
    }
    return absl::OkStatus();
  };
  for (const auto& entry : spec.entries()) {
    for (const auto& axis : entry) MS_RETURN_IF_ERROR(check(axis));
  }
  for (const auto& axis : spec.unreduced()) MS_RETURN_IF_ERROR(check(axis));
  return absl::OkStatus();
}

// A PartitionSpec written as a JSON list: per dim null, "axis" or ["a", "b"].
absl::StatusOr<std::vector<PartitionSpec::Entry>> GetSpecEntries(const Json& j,
                                                                 absl::string_view what) {
  if (!j.is_array()) {
    return InvalidArgument(what, " must be a list (a PartitionSpec), got ", Show(j));
  }
  std::vector<PartitionSpec::Entry> entries;
  for (const Json& e : j) {
    PartitionSpec::Entry entry;
    if (e.is_null()) {
    } else if (e.is_string()) {
      entry.push_back(e.get<std::string>());
    } else if (e.is_array()) {
      for (const Json& a : e) {
        if (!a.is_string()) {
          return InvalidArgument(what, " ", Show(j), ": entry ", entries.size(),
                                 " must name axes as strings, got ", Show(a));
        }
        entry.push_back(a.get<std::string>());
      }
    } else {
      return InvalidArgument(what, " ", Show(j), ": entry ", entries.size(),
                             " must be null, an axis name or a list of axis names, got ",
                             Show(e));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

// A spec list, or (when `allow_unreduced`) {"spec": [...], "unreduced": [...]}.
absl::StatusOr<PartitionSpec> GetSpec(const Json& j, const ModelFile& model,
                                      absl::string_view what, bool allow_unreduced) {
  std::vector<std::string> unreduced;
  const Json* list = &j;
  if (j.is_object() && allow_unreduced) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "spec" && it.key() != "unreduced") {
        return InvalidArgument(what, " ", Show(j), ": unknown field '", it.key(),
                               "' (expected 'spec' and 'unreduced')");
      }
    }
    if (!j.contains("spec")) return InvalidArgument(what, " ", Show(j), ": missing 'spec'");
    list = &j["spec"];
    if (j.contains("unreduced")) {
      const Json& u = j["unreduced"];
      if (!u.is_array()) {
        return InvalidArgument(what, " ", Show(j), ": 'unreduced' must be a list of axis names");
      }
      for (const Json& a : u) {
        MS_ASSIGN_OR_RETURN(std::string name, GetString(a, absl::StrCat(what, ".unreduced")));
        unreduced.push_back(std::move(name));
      }
    }
  }
  MS_ASSIGN_OR_RETURN(auto entries, GetSpecEntries(*list, what));
  PartitionSpec spec(std::move(entries), std::move(unreduced));
  MS_RETURN_IF_ERROR(CheckSpecAxes(spec, model, what, Show(j)));
  return spec;
}

absl::Status CheckKeys(const Json& j, std::initializer_list<absl::string_view> allowed,
                       absl::string_view what) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (absl::string_view a : allowed) ok |= (it.key() == a);
    if (!ok) return InvalidArgument(what, ": unknown field '", it.key(), "'");
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> GetFloatDType(const Json& j, absl::string_view what) {
  MS_ASSIGN_OR_RETURN(std::string s, GetString(j, what));
  if (s == "float32") return DType::kFloat32;
  if (s == "bfloat16") return DType::kBFloat16;
  return InvalidArgument(what, " '", s, "' is not supported (float32 or bfloat16)");
}

absl::Status ParseMesh(const Json& root, ModelFile& m) {
  if (!root.contains("mesh")) return InvalidArgument("missing field 'mesh'");
  const Json& mesh = root["mesh"];
  if (!mesh.is_object() || mesh.empty()) {
    return InvalidArgument("mesh must be a non-empty object {axis: size}, got ", Show(mesh));
  }
  int num_auto = 0;
  for (auto it = mesh.begin(); it != mesh.end(); ++it) {
    MS_ASSIGN_OR_RETURN(int64_t size, GetInt(it.value(), absl::StrCat("mesh axis '", it.key(), "'")));
    if (it.key().empty()) return InvalidArgument("mesh axis name must not be empty");
    if (size == -1) {
      if (++num_auto > 1) {
        return InvalidArgument("mesh ", Show(mesh), ": at most one axis may be -1 (axis '",
                               it.key(), "')");
      }
    } else if (size < 1) {
      return InvalidArgument("mesh axis '", it.key(), "' has size ", size,
                             " (must be >= 1 or -1)");
    }
    m.mesh_axes.emplace_back(it.key(), size);
  }
  return absl::OkStatus();
}

absl::Status ParseInputs(const Json& root, ModelFile& m) {
  if (!root.contains("inputs")) return InvalidArgument("missing field 'inputs'");
  const Json& inputs = root["inputs"];
  if (!inputs.is_object() || inputs.empty()) {
    return InvalidArgument("inputs must be a non-empty object, got ", Show(inputs));
  }
  for (auto it = inputs.begin(); it != inputs.end(); ++it) {
    std::string what = absl::StrCat("input '", it.key(), "'");
    const Json& j = it.value();
    if (!j.is_object()) return InvalidArgument(what, " must be an object, got ", Show(j));
    MS_RETURN_IF_ERROR(CheckKeys(j, {"shape", "sharding", "dtype"}, what));
    InputDef in;
    in.name = it.key();
    in.dtype = m.dtype;
    if (!j.contains("shape")) return InvalidArgument(what, ": missing 'shape'");
    MS_ASSIGN_OR_RETURN(in.shape, GetShape(j["shape"], absl::StrCat(what, " shape"), true));
    if (j.contains("sharding")) {
      MS_ASSIGN_OR_RETURN(in.sharding, GetSpec(j["sharding"], m, absl::StrCat(what, " sharding"), false));
      if (in.sharding.size() > static_cast<int>(in.shape.size())) {
        return InvalidArgument(what, " sharding ", Show(j["sharding"]), " has ",
                               in.sharding.size(), " entries for rank ", in.shape.size());
      }
    }
    if (j.contains("dtype")) {
      MS_ASSIGN_OR_RETURN(std::string s, GetString(j["dtype"], absl::StrCat(what, " dtype")));
      if (s == "int32") {
        in.dtype = DType::kInt32;
      } else {
        MS_ASSIGN_OR_RETURN(in.dtype, GetFloatDType(j["dtype"], absl::StrCat(what, " dtype")));
      }
    }
    m.inputs.push_back(std::move(in));
  }
  return absl::OkStatus();
}

absl::StatusOr<InitKind> ParseInitKind(const std::string& s, absl::string_view what) {
  if (s == "zeros") return InitKind::kZeros;
  if (s == "ones") return InitKind::kOnes;
  if (s == "normal") return InitKind::kNormal;
  if (s == "lecun_normal") return InitKind::kLecunNormal;
  if (s == "xavier_uniform") return InitKind::kXavierUniform;
  if (s == "uniform") return InitKind::kUniform;
  return InvalidArgument(what, " init '", s,
                         "' is unknown (zeros, ones, normal, lecun_normal, xavier_uniform, "
                         "uniform)");
}

absl::Status ParseParams(const Json& root, ModelFile& m) {
  if (!root.contains("params")) return absl::OkStatus();
  const Json& params = root["params"];
  if (!params.is_object()) return InvalidArgument("params must be an object, got ", Show(params));
  for (auto it = params.begin(); it != params.end(); ++it) {
    std::string what = absl::StrCat("param '", it.key(), "'");
    const Json& j = it.value();
    if (!j.is_object()) return InvalidArgument(what, " must be an object, got ", Show(j));
    MS_RETURN_IF_ERROR(
        CheckKeys(j, {"shape", "sharding", "dtype", "init", "stddev", "scale"}, what));
    ParamDef p;
    p.name = it.key();
    p.dtype = m.dtype;
    if (!j.contains("shape")) return InvalidArgument(what, ": missing 'shape'");
    MS_ASSIGN_OR_RETURN(p.shape, GetShape(j["shape"], absl::StrCat(what, " shape"), false));
    if (j.contains("sharding")) {
      MS_ASSIGN_OR_RETURN(p.sharding, GetSpec(j["sharding"], m, absl::StrCat(what, " sharding"), false));
      if (p.sharding.size() > static_cast<int>(p.shape.size())) {
        return InvalidArgument(what, " sharding ", Show(j["sharding"]), " has ",
                               p.sharding.size(), " entries for rank ", p.shape.size());
      }
    }
    if (j.contains("dtype")) {
      MS_ASSIGN_OR_RETURN(p.dtype, GetFloatDType(j["dtype"], absl::StrCat(what, " dtype")));
    }
    if (j.contains("init")) {
      MS_ASSIGN_OR_RETURN(std::string s, GetString(j["init"], absl::StrCat(what, " init")));
      MS_ASSIGN_OR_RETURN(p.init, ParseInitKind(s, what));
    }
    if (j.contains("stddev")) {
      MS_ASSIGN_OR_RETURN(p.stddev, GetNumber(j["stddev"], absl::StrCat(what, " stddev")));
      if (!(p.stddev >= 0)) return InvalidArgument(what, " stddev ", p.stddev, " must be >= 0");
    }
    if (j.contains("scale")) {
      MS_ASSIGN_OR_RETURN(p.scale, GetNumber(j["scale"], absl::StrCat(what, " scale")));
      if (!(p.scale >= 0)) return InvalidArgument(what, " scale ", p.scale, " must be >= 0");
    }
    m.params.push_back(std::move(p));
  }
  return absl::OkStatus();
}

enum class Arity { kUnary, kBinary };

struct OpInfo {
  absl::string_view op;
  Arity arity;
};

constexpr OpInfo kOps[] = {
    {"linear", Arity::kUnary},    {"einsum", Arity::kBinary},  {"embed", Arity::kUnary},
    {"rms_norm", Arity::kUnary},  {"layer_norm", Arity::kUnary}, {"relu", Arity::kUnary},
    {"gelu", Arity::kUnary},      {"silu", Arity::kUnary},     {"tanh", Arity::kUnary},
    {"add", Arity::kBinary},      {"mul", Arity::kBinary},     {"softmax", Arity::kUnary},
    {"reshape", Arity::kUnary},   {"transpose", Arity::kUnary}, {"reshard", Arity::kUnary},
};

const OpInfo* FindOp(absl::string_view op) {
  for (const OpInfo& info : kOps) {
    if (info.op == op) return &info;
  }
  return nullptr;
}

// Reads the param-name field `key` of a layer; `required` ops must have it.
absl::Status GetParamRef(const Json& j, absl::string_view key, bool required,
                         const ModelFile& m, std::string& out) {
  if (!j.contains(std::string(key))) {
    if (required) return InvalidArgument("missing '", key, "'");
    return absl::OkStatus();
  }
  MS_ASSIGN_OR_RETURN(out, GetString(j[std::string(key)], key));
  if (m.FindParam(out) == nullptr) {
    return InvalidArgument(key, " '", out, "' is not a param");
  }
  return absl::OkStatus();
}

absl::Status ParseLayerOperands(const Json& j, const OpInfo& info, LayerDef& l) {
  if (info.arity == Arity::kUnary) {
    if (j.contains("inputs")) {
      return InvalidArgument("op '", l.op, "' takes one 'input', not 'inputs'");
    }
    if (!j.contains("input")) return InvalidArgument("missing 'input'");
    MS_ASSIGN_OR_RETURN(std::string in, GetString(j["input"], "input"));
    l.inputs.push_back(std::move(in));
    return absl::OkStatus();
  }
  if (j.contains("input")) {
    return InvalidArgument("op '", l.op, "' takes two 'inputs', not 'input'");
  }
  if (!j.contains("inputs")) return InvalidArgument("missing 'inputs'");
  const Json& ins = j["inputs"];
  if (!ins.is_array() || ins.size() != 2) {
    return InvalidArgument("op '", l.op, "' needs 'inputs' with two names, got ", Show(ins));
  }
  for (const Json& n : ins) {
    MS_ASSIGN_OR_RETURN(std::string in, GetString(n, "inputs"));
    l.inputs.push_back(std::move(in));
  }
  return absl::OkStatus();
}

// The op-specific fields of one layer.
absl::Status ParseLayerFields(const Json& j, const ModelFile& m, LayerDef& l) {
  const std::string& op = l.op;
  MS_RETURN_IF_ERROR(GetParamRef(j, "kernel", op == "linear", m, l.kernel));
  MS_RETURN_IF_ERROR(GetParamRef(j, "bias", op == "layer_norm", m, l.bias));
  MS_RETURN_IF_ERROR(
      GetParamRef(j, "scale", op == "rms_norm" || op == "layer_norm", m, l.scale));
  MS_RETURN_IF_ERROR(GetParamRef(j, "table", op == "embed", m, l.table));
  if (op == "einsum") {
    if (!j.contains("equation")) return InvalidArgument("missing 'equation'");
    MS_ASSIGN_OR_RETURN(l.equation, GetString(j["equation"], "equation"));
    if (l.equation.find("->") == std::string::npos || l.equation.find(',') == std::string::npos) {
      return InvalidArgument("equation '", l.equation,
                             "' must have the form 'ab,bc->ac' (two operands and '->')");
    }
  }
  if (op == "softmax" && j.contains("axis")) {
    MS_ASSIGN_OR_RETURN(l.axis, GetInt(j["axis"], "axis"));
  }
  if (op == "rms_norm" || op == "layer_norm") {
    if (j.contains("epsilon")) {
      MS_ASSIGN_OR_RETURN(l.epsilon, GetNumber(j["epsilon"], "epsilon"));
      if (!(l.epsilon >= 0)) return InvalidArgument("epsilon ", l.epsilon, " must be >= 0");
    }
  }
  if (op == "reshape") {
    if (!j.contains("shape")) return InvalidArgument("missing 'shape'");
    MS_ASSIGN_OR_RETURN(l.shape, GetShape(j["shape"], "shape", true));
    int minus = 0;
    for (int64_t d : l.shape) minus += (d == -1);
    if (minus > 1) {
      return InvalidArgument("shape ", Show(j["shape"]), " has more than one -1");
    }
  }
  if (op == "transpose") {
    if (!j.contains("perm")) return InvalidArgument("missing 'perm'");
    if (!j["perm"].is_array()) return InvalidArgument("perm must be a list, got ", Show(j["perm"]));
    std::vector<bool> seen(j["perm"].size(), false);
    for (const Json& p : j["perm"]) {
      MS_ASSIGN_OR_RETURN(int64_t v, GetInt(p, "perm"));
      if (v < 0 || v >= static_cast<int64_t>(seen.size()) || seen[v]) {
        return InvalidArgument("perm ", Show(j["perm"]), " is not a permutation");
      }
      seen[v] = true;
      l.perm.push_back(v);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerDef> ParseLayer(const Json& j, const ModelFile& m,
                                    const absl::flat_hash_set<std::string>& defined) {
  LayerDef l;
  MS_ASSIGN_OR_RETURN(l.name, GetString(j["name"], "name"));
  if (l.name.empty()) return InvalidArgument("name must not be empty");
  MS_RETURN_IF_ERROR(CheckKeys(j, {"name", "op", "input", "inputs", "kernel", "bias", "scale",
                                   "table", "equation", "axis", "perm", "shape", "epsilon",
                                   "out_sharding", "auto_axes"},
                               "layer"));
  if (!j.contains("op")) return InvalidArgument("missing 'op'");
  MS_ASSIGN_OR_RETURN(l.op, GetString(j["op"], "op"));
  const OpInfo* info = FindOp(l.op);
  if (info == nullptr) return InvalidArgument("unknown op '", l.op, "'");
  MS_RETURN_IF_ERROR(ParseLayerOperands(j, *info, l));
  for (const std::string& in : l.inputs) {
    if (!defined.contains(in) && m.FindParam(in) == nullptr) {
      return InvalidArgument("operand '", in,
                             "' is not an input, a param or an earlier layer");
    }
  }
  MS_RETURN_IF_ERROR(ParseLayerFields(j, m, l));
  if (j.contains("out_sharding")) {
    MS_ASSIGN_OR_RETURN(l.out_sharding, GetSpec(j["out_sharding"], m, "out_sharding", true));
  }
  if (j.contains("auto_axes")) {
    if (!j["auto_axes"].is_boolean()) {
      return InvalidArgument("auto_axes must be true or false, got ", Show(j["auto_axes"]));
    }
    l.auto_axes = j["auto_axes"].get<bool>();
  }
  if (l.auto_axes && !l.out_sharding.has_value()) {
    return InvalidArgument("auto_axes requires out_sharding");
  }
  if (l.op == "reshard" && !l.out_sharding.has_value()) {
    return InvalidArgument("op 'reshard' requires out_sharding");
  }
  return l;
}

absl::Status ParseLayers(const Json& root, ModelFile& m) {
  if (!root.contains("layers")) return InvalidArgument("missing field 'layers'");
  const Json& layers = root["layers"];
  if (!layers.is_array() || layers.empty()) {
    return InvalidArgument("layers must be a non-empty list, got ", Show(layers));
  }
  absl::flat_hash_set<std::string> defined;
  for (const InputDef& in : m.inputs) defined.insert(in.name);
  for (const Json& j : layers) {
    if (!j.is_object() || !j.contains("name")) {
      return InvalidArgument("layer ", m.layers.size(), " must be an object with a 'name', got ",
                             Show(j));
    }
    std::string label = j["name"].is_string() ? absl::StrCat("layer '", j["name"].get<std::string>(), "'")
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

absl::Status ParseOutputs(const Json& root, ModelFile& m) {
  if (!root.contains("outputs")) return InvalidArgument("missing field 'outputs'");
  const Json& outs = root["outputs"];
  if (!outs.is_array() || outs.empty()) {
    return InvalidArgument("outputs must be a non-empty list of names, got ", Show(outs));
  }
  absl::flat_hash_set<std::string> seen;
  for (const Json& o : outs) {
    MS_ASSIGN_OR_RETURN(std::string name, GetString(o, "outputs"));
    if (m.FindLayer(name) == nullptr && m.FindInput(name) == nullptr) {
      return InvalidArgument("output '", name, "' is not a layer");
    }
    if (!seen.insert(name).second) return InvalidArgument("output '", name, "' is listed twice");
    m.outputs.push_back(std::move(name));
  }
  return absl::OkStatus();
}

bool IsAbsolutePath(absl::string_view path) { return !path.empty() && path[0] == '/'; }

absl::Status ParseBody(const Json& root, ModelFile& m) {
  MS_RETURN_IF_ERROR(CheckKeys(root, {"name", "mesh", "dtype", "seed", "checkpoint", "inputs",
                                      "params", "layers", "outputs"},
                               "top level"));
  MS_RETURN_IF_ERROR(ParseMesh(root, m));
  if (root.contains("dtype")) {
    MS_ASSIGN_OR_RETURN(m.dtype, GetFloatDType(root["dtype"], "dtype"));
  }
  if (root.contains("seed")) {
    MS_ASSIGN_OR_RETURN(m.seed, GetInt(root["seed"], "seed"));
  }
  if (root.contains("checkpoint")) {
    MS_ASSIGN_OR_RETURN(std::string ckpt, GetString(root["checkpoint"], "checkpoint"));
    if (ckpt.empty()) return InvalidArgument("checkpoint must not be empty");
    if (IsAbsolutePath(ckpt) || m.model_dir.empty()) {
      m.checkpoint = ckpt;
    } else {
      m.checkpoint = absl::StrCat(m.model_dir, "/", ckpt);
    }
  }
  MS_RETURN_IF_ERROR(ParseInputs(root, m));
  MS_RETURN_IF_ERROR(ParseParams(root, m));
  for (const ParamDef& p : m.params) {
    if (m.FindInput(p.name) != nullptr) {
      return InvalidArgument("param '", p.name, "' has the same name as an input");
    }
  }
  MS_RETURN_IF_ERROR(ParseLayers(root, m));
  MS_RETURN_IF_ERROR(ParseOutputs(root, m));
  return absl::OkStatus();
}

}  // namespace

const ParamDef* ModelFile::FindParam(absl::string_view name) const {
  for (const ParamDef& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const InputDef* ModelFile::FindInput(absl::string_view name) const {
  for (const InputDef& in : inputs) {
    if (in.name == name) return &in;
  }
  return nullptr;
}

const LayerDef* ModelFile::FindLayer(absl::string_view name) const {
  for (const LayerDef& l : layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

absl::StatusOr<ModelFile> ParseModelFile(absl::string_view json_text,
                                         absl::string_view model_dir) {
  Json root = Json::parse(json_text.begin(), json_text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Re-parse with exceptions only to get the position of the error.
    std::string detail = "not valid JSON";
    try {
      Json unused = Json::parse(json_text.begin(), json_text.end());
      (void)unused;
    } catch (const Json::exception& e) {
      detail = e.what();
    }
    return InvalidArgument("model file: ", detail);
  }
  if (!root.is_object()) return InvalidArgument("model file: top level must be an object");
  ModelFile m;
  m.model_dir = std::string(model_dir);
  m.json_text = std::string(json_text);
  if (!root.contains("name") || !root["name"].is_string() ||
      root["name"].get<std::string>().empty()) {
    return InvalidArgument("model file: missing or empty string field 'name'");
  }
  m.name = root["name"].get<std::string>();
  MS_RETURN_IF_ERROR(ParseBody(root, m), "model '", m.name, "'");
  return m;
}

absl::StatusOr<ModelFile> LoadModelFile(absl::string_view path) {
  std::ifstream file{std::string(path)};
  if (!file) return NotFound("cannot read model file '", path, "'");
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::string dir = ".";
  size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos) dir = std::string(path.substr(0, slash == 0 ? 1 : slash));
  return ParseModelFile(buffer.str(), dir);
}

}  // namespace meshserve
