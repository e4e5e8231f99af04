// Parsing and structural validation of the model file (model-format.md).
//
// The JSON is read with nlohmann::ordered_json so that the mesh axes keep the
// order the user wrote (the first axis is major). Every error is
// kInvalidArgument (kNotFound for an unreadable file) and its message starts
// with "model '<name>': " followed by the field path and the offending value.
#include "common/model/model_file.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"
#include "common/json/sharding_json.h"
#include "common/model/model_file_internal.h"

namespace meshserve {
namespace model_file_internal {

// A list of integers; each >= 1, or -1 where `allow_minus_one`.
absl::StatusOr<std::vector<int64_t>> GetShape(const Json& j, absl::string_view what,
                                              bool allow_minus_one) {
  if (!j.is_array()) return InvalidArgument(what, " must be a list of ints, got ", ShowJson(j));
  std::vector<int64_t> shape;
  for (const Json& d : j) {
    MS_ASSIGN_OR_RETURN(int64_t v, JsonInt(d, what));
    if (v < 1 && !(allow_minus_one && v == -1)) {
      return InvalidArgument(what, " ", ShowJson(j), ": dim ", shape.size(), " is ", v,
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

// A spec (sharding_json.h grammar) whose axes are the model's; unreduced
// axes only where `allow_unreduced` (out_sharding).
absl::StatusOr<PartitionSpec> GetSpec(const Json& j, const ModelFile& model,
                                      absl::string_view what, bool allow_unreduced) {
  MS_ASSIGN_OR_RETURN(PartitionSpec spec, PartitionSpecFromJson(j, what));
  if (!allow_unreduced && !spec.unreduced().empty()) {
    return InvalidArgument(what, " ", ShowJson(j),
                           ": unreduced axes are only allowed in out_sharding");
  }
  MS_RETURN_IF_ERROR(CheckSpecAxes(spec, model, what, ShowJson(j)));
  return spec;
}

}  // namespace model_file_internal

namespace {

using model_file_internal::GetShape;
using model_file_internal::GetSpec;

// The "shape" (required) and "sharding" (optional, at most rank entries) of
// an input or a param.
absl::Status GetShapeAndSharding(const Json& j, const ModelFile& m, absl::string_view what,
                                 bool allow_minus_one, std::vector<int64_t>& shape,
                                 PartitionSpec& sharding) {
  if (!j.contains("shape")) return InvalidArgument(what, ": missing 'shape'");
  MS_ASSIGN_OR_RETURN(shape, GetShape(j["shape"], absl::StrCat(what, " shape"), allow_minus_one));
  if (!j.contains("sharding")) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(sharding, GetSpec(j["sharding"], m, absl::StrCat(what, " sharding"), false));
  if (sharding.size() > static_cast<int>(shape.size())) {
    return InvalidArgument(what, " sharding ", ShowJson(j["sharding"]), " has ", sharding.size(),
                           " entries for rank ", shape.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> GetFloatDType(const Json& j, absl::string_view what) {
  MS_ASSIGN_OR_RETURN(std::string s, JsonString(j, what));
  if (s == "float32") return DType::kFloat32;
  if (s == "bfloat16") return DType::kBFloat16;
  return InvalidArgument(what, " '", s, "' is not supported (float32 or bfloat16)");
}

// A param's dtype: the model's spellings or the checkpoint's (F32, BF16);
// float16 / F16 (a checkpoint dtype) is widened to float32 when read.
absl::StatusOr<DType> GetParamDType(const Json& j, absl::string_view what) {
  MS_ASSIGN_OR_RETURN(std::string s, JsonString(j, what));
  if (s == "F32") return DType::kFloat32;
  if (s == "BF16") return DType::kBFloat16;
  if (s == "F16" || s == "float16") return DType::kFloat32;
  if (s == "float32" || s == "bfloat16") return GetFloatDType(j, what);
  return InvalidArgument(what, " '", s,
                         "' is not supported (float32, bfloat16, float16, F32, BF16, F16)");
}

// "from" (a checkpoint tensor name) and "from_offset" (one int >= 0 per dim).
absl::Status ParseParamSource(const Json& j, absl::string_view what, ParamDef& p) {
  p.from = p.name;
  if (j.contains("from")) {
    MS_ASSIGN_OR_RETURN(p.from, JsonString(j["from"], absl::StrCat(what, " from")));
    if (p.from.empty()) return InvalidArgument(what, " from must not be empty");
    p.has_from = true;
  }
  p.from_offset.assign(p.shape.size(), 0);
  if (!j.contains("from_offset")) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(p.from_offset,
                      JsonIntList(j["from_offset"], absl::StrCat(what, " from_offset")));
  if (p.from_offset.size() != p.shape.size()) {
    return InvalidArgument(what, " from_offset ", ShowJson(j["from_offset"]), " has ",
                           p.from_offset.size(), " entries for rank ", p.shape.size());
  }
  for (size_t i = 0; i < p.from_offset.size(); ++i) {
    if (p.from_offset[i] < 0) {
      return InvalidArgument(what, " from_offset ", ShowJson(j["from_offset"]), ": dim ", i,
                             " is ", p.from_offset[i], " (must be >= 0)");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMeshField(const Json& root, ModelFile& m) {
  if (!root.contains("mesh")) return InvalidArgument("missing field 'mesh'");
  const Json& mesh = root["mesh"];
  if (!mesh.is_object() || mesh.empty()) {
    return InvalidArgument("mesh must be a non-empty object {axis: size}, got ", ShowJson(mesh));
  }
  int num_auto = 0;
  for (auto it = mesh.begin(); it != mesh.end(); ++it) {
    MS_ASSIGN_OR_RETURN(int64_t size, JsonInt(it.value(), absl::StrCat("mesh axis '", it.key(), "'")));
    if (it.key().empty()) return InvalidArgument("mesh axis name must not be empty");
    if (size == -1) {
      if (++num_auto > 1) {
        return InvalidArgument("mesh ", ShowJson(mesh), ": at most one axis may be -1 (axis '",
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
    return InvalidArgument("inputs must be a non-empty object, got ", ShowJson(inputs));
  }
  for (auto it = inputs.begin(); it != inputs.end(); ++it) {
    std::string what = absl::StrCat("input '", it.key(), "'");
    const Json& j = it.value();
    if (!j.is_object()) return InvalidArgument(what, " must be an object, got ", ShowJson(j));
    MS_RETURN_IF_ERROR(CheckJsonKeys(j, {"shape", "sharding", "dtype"}, what));
    InputDef in;
    in.name = it.key();
    in.dtype = m.dtype;
    MS_RETURN_IF_ERROR(GetShapeAndSharding(j, m, what, true, in.shape, in.sharding));
    if (j.contains("dtype")) {
      MS_ASSIGN_OR_RETURN(std::string s, JsonString(j["dtype"], absl::StrCat(what, " dtype")));
      if (s == "int32") {
        in.dtype = DType::kInt32;
      } else if (s == "int64") {
        in.dtype = DType::kInt64;
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

// The optional number field `key` of a param, which must be >= 0.
absl::Status GetNonNegative(const Json& j, const char* key, absl::string_view what,
                            double& out) {
  if (!j.contains(key)) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(out, JsonNumber(j[key], absl::StrCat(what, " ", key)));
  if (!(out >= 0)) return InvalidArgument(what, " ", key, " ", out, " must be >= 0");
  return absl::OkStatus();
}

absl::Status ParseParams(const Json& root, ModelFile& m) {
  if (!root.contains("params")) return absl::OkStatus();
  const Json& params = root["params"];
  if (!params.is_object()) return InvalidArgument("params must be an object, got ", ShowJson(params));
  for (auto it = params.begin(); it != params.end(); ++it) {
    std::string what = absl::StrCat("param '", it.key(), "'");
    const Json& j = it.value();
    if (!j.is_object()) return InvalidArgument(what, " must be an object, got ", ShowJson(j));
    MS_RETURN_IF_ERROR(CheckJsonKeys(j, {"shape", "sharding", "dtype", "init", "stddev", "scale",
                                         "from", "from_offset"},
                                     what));
    ParamDef p;
    p.name = it.key();
    p.dtype = m.dtype;
    // "auto": the search chooses (other strings are specs, "P('fsdp', None)").
    p.auto_sharding = j.contains("sharding") && j["sharding"].is_string() &&
                      j["sharding"].get<std::string>() == "auto";
    Json shaped = j;
    if (p.auto_sharding) shaped.erase("sharding");
    MS_RETURN_IF_ERROR(GetShapeAndSharding(shaped, m, what, false, p.shape, p.sharding));
    if (j.contains("dtype")) {
      MS_ASSIGN_OR_RETURN(p.dtype, GetParamDType(j["dtype"], absl::StrCat(what, " dtype")));
    }
    MS_RETURN_IF_ERROR(ParseParamSource(j, what, p));
    if (j.contains("init")) {
      MS_ASSIGN_OR_RETURN(std::string s, JsonString(j["init"], absl::StrCat(what, " init")));
      MS_ASSIGN_OR_RETURN(p.init, ParseInitKind(s, what));
    }
    MS_RETURN_IF_ERROR(GetNonNegative(j, "stddev", what, p.stddev));
    MS_RETURN_IF_ERROR(GetNonNegative(j, "scale", what, p.scale));
    m.params.push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::Status ParseOutputs(const Json& root, ModelFile& m) {
  if (!root.contains("outputs")) return InvalidArgument("missing field 'outputs'");
  const Json& outs = root["outputs"];
  if (!outs.is_array() || outs.empty()) {
    return InvalidArgument("outputs must be a non-empty list of names, got ", ShowJson(outs));
  }
  absl::flat_hash_set<std::string> seen;
  for (const Json& o : outs) {
    MS_ASSIGN_OR_RETURN(std::string name, JsonString(o, "outputs"));
    if (m.FindLayer(name) == nullptr && m.FindInput(name) == nullptr) {
      return InvalidArgument("output '", name, "' is not a layer");
    }
    if (!seen.insert(name).second) return InvalidArgument("output '", name, "' is listed twice");
    m.outputs.push_back(std::move(name));
  }
  return absl::OkStatus();
}

bool IsAbsolutePath(absl::string_view path) { return !path.empty() && path[0] == '/'; }

template <typename T>
const T* FindByName(const std::vector<T>& items, absl::string_view name) {
  for (const T& item : items) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

// "checkpoint": a path (a .safetensors file or a model.safetensors.index.json)
// or a non-empty list of .safetensors paths; each resolved against model_dir.
absl::Status ParseCheckpoint(const Json& root, ModelFile& m) {
  if (!root.contains("checkpoint")) return absl::OkStatus();
  const Json& c = root["checkpoint"];
  std::vector<std::string> paths;
  if (c.is_array()) {
    if (c.empty()) return InvalidArgument("checkpoint must not be an empty list");
    MS_ASSIGN_OR_RETURN(paths, JsonStringList(c, "checkpoint"));
  } else {
    MS_ASSIGN_OR_RETURN(std::string one, JsonString(c, "checkpoint"));
    paths.push_back(std::move(one));
  }
  for (const std::string& ckpt : paths) {
    if (ckpt.empty()) return InvalidArgument("checkpoint ", ShowJson(c), ": a path is empty");
    const bool as_is = IsAbsolutePath(ckpt) || m.model_dir.empty();
    m.checkpoints.push_back(as_is ? ckpt : absl::StrCat(m.model_dir, "/", ckpt));
  }
  m.checkpoint = m.checkpoints.front();
  return absl::OkStatus();
}

// "generation": {"context_length": N >= 1, "eos_token_ids": [ids >= 0]}.
absl::Status ParseGeneration(const Json& root, ModelFile& m) {
  if (!root.contains("generation")) return absl::OkStatus();
  const Json& g = root["generation"];
  if (!g.is_object()) return InvalidArgument("generation must be an object, got ", ShowJson(g));
  MS_RETURN_IF_ERROR(CheckJsonKeys(g, {"context_length", "eos_token_ids"}, "generation"));
  if (g.contains("context_length")) {
    MS_ASSIGN_OR_RETURN(m.context_length, JsonInt(g["context_length"], "context_length"));
    if (m.context_length < 1) {
      return InvalidArgument("generation context_length ", m.context_length, " must be >= 1");
    }
  }
  if (g.contains("eos_token_ids")) {
    MS_ASSIGN_OR_RETURN(m.eos_token_ids, JsonIntList(g["eos_token_ids"], "eos_token_ids"));
    for (int64_t id : m.eos_token_ids) {
      if (id < 0) return InvalidArgument("generation eos_token_ids has ", id, " (must be >= 0)");
    }
  }
  return absl::OkStatus();
}

// "checkpoint_tied" {name: twin} and "checkpoint_ignored" [names] (model_file.h).
absl::Status ParseCheckpointNames(const Json& root, ModelFile& m) {
  absl::flat_hash_set<std::string> read;  // params and the tensors they read
  for (const ParamDef& p : m.params) read.insert({p.name, p.from});
  auto check_new = [&](const std::string& name, absl::string_view field) -> absl::Status {
    if (name.empty()) return InvalidArgument(field, " has an empty name");
    if (read.count(name) > 0) {
      return InvalidArgument(field, " names '", name, "', which a param is or reads");
    }
    return absl::OkStatus();
  };
  if (root.contains("checkpoint_tied")) {
    const Json& t = root["checkpoint_tied"];
    if (!t.is_object()) {
      return InvalidArgument("checkpoint_tied must be an object {name: twin}, got ", ShowJson(t));
    }
    for (auto it = t.begin(); it != t.end(); ++it) {
      MS_RETURN_IF_ERROR(check_new(it.key(), "checkpoint_tied"));
      MS_ASSIGN_OR_RETURN(std::string twin,
                          JsonString(it.value(), absl::StrCat("checkpoint_tied '", it.key(), "'")));
      if (read.count(twin) == 0) {
        return InvalidArgument("checkpoint_tied '", it.key(), "' -> '", twin,
                               "': the twin is no param and no tensor a param reads");
      }
      m.checkpoint_tied[it.key()] = std::move(twin);
    }
  }
  if (!root.contains("checkpoint_ignored")) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(m.checkpoint_ignored,
                      JsonStringList(root["checkpoint_ignored"], "checkpoint_ignored"));
  absl::flat_hash_set<std::string> seen;
  for (const std::string& name : m.checkpoint_ignored) {
    MS_RETURN_IF_ERROR(check_new(name, "checkpoint_ignored"));
    if (m.checkpoint_tied.count(name) > 0 || !seen.insert(name).second) {
      return InvalidArgument("checkpoint_ignored names '", name, "' twice or as tied too");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseBody(const Json& root, ModelFile& m) {
  MS_RETURN_IF_ERROR(CheckJsonKeys(root, {"name", "mesh", "dtype", "seed", "checkpoint", "inputs",
                                      "params", "layers", "outputs", "batching", "generation",
                                      "checkpoint_tied", "checkpoint_ignored"},
                               "top level"));
  MS_RETURN_IF_ERROR(ParseMeshField(root, m));
  if (root.contains("dtype")) {
    MS_ASSIGN_OR_RETURN(m.dtype, GetFloatDType(root["dtype"], "dtype"));
  }
  if (root.contains("seed")) {
    MS_ASSIGN_OR_RETURN(m.seed, JsonInt(root["seed"], "seed"));
  }
  MS_RETURN_IF_ERROR(ParseCheckpoint(root, m));
  MS_RETURN_IF_ERROR(ParseInputs(root, m));
  MS_RETURN_IF_ERROR(ParseParams(root, m));
  for (const ParamDef& p : m.params) {
    if (m.FindInput(p.name) != nullptr) {
      return InvalidArgument("param '", p.name, "' has the same name as an input");
    }
    if (p.has_from && m.checkpoints.empty()) {
      return InvalidArgument("param '", p.name, "' sets from '", p.from,
                             "' but the model has no checkpoint");
    }
  }
  MS_RETURN_IF_ERROR(model_file_internal::ParseLayers(root, m));
  MS_RETURN_IF_ERROR(ParseOutputs(root, m));
  MS_RETURN_IF_ERROR(ParseGeneration(root, m));
  MS_RETURN_IF_ERROR(ParseCheckpointNames(root, m));
  return ParseBatchingConfig(root, &m.batching);
}

}  // namespace

const ParamDef* ModelFile::FindParam(absl::string_view name) const {
  return FindByName(params, name);
}
const InputDef* ModelFile::FindInput(absl::string_view name) const {
  return FindByName(inputs, name);
}
const LayerDef* ModelFile::FindLayer(absl::string_view name) const {
  return FindByName(layers, name);
}

absl::StatusOr<ModelFile> ParseModelFile(absl::string_view json_text,
                                         absl::string_view model_dir, bool allow_auto_sharding) {
  MS_ASSIGN_OR_RETURN(Json root, ParseJsonText(json_text), "model file");
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
  for (const ParamDef& p : m.params) {
    if (p.auto_sharding && !allow_auto_sharding) {
      return InvalidArgument("model '", m.name, "': param '", p.name,
                             "' sharding \"auto\" is not resolved: `meshserve import "
                             "--auto_shard` or `meshserve suggest` chooses it before serving");
    }
  }
  return m;
}

absl::StatusOr<ModelFile> LoadModelFile(absl::string_view path, bool allow_auto_sharding) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path), "model file");
  return ParseModelFile(text, DirOf(path), allow_auto_sharding);
}

}  // namespace meshserve
