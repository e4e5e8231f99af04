#include "common/conformance/rules_case_decode.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace rules_case {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxElements = int64_t{1} << 60;

absl::StatusOr<int64_t> AsInt(const Json& v, absl::string_view what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgument(what, " is out of range: ", Describe(v));
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d > -1e15 && d < 1e15 && d == static_cast<double>(static_cast<int64_t>(d))) {
      return static_cast<int64_t>(d);
    }
  }
  return InvalidArgument(what, " must be an integer, got ", Describe(v));
}

const Json* Field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::vector<int64_t>> AsIntList(const Json& v, absl::string_view what,
                                               bool allow_scalar) {
  if (allow_scalar && (v.is_number())) {
    MS_ASSIGN_OR_RETURN(int64_t x, AsInt(v, what));
    return std::vector<int64_t>{x};
  }
  if (!v.is_array()) return InvalidArgument(what, " must be a list of integers, got ", Describe(v));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    MS_ASSIGN_OR_RETURN(int64_t x, AsInt(v[i], absl::StrCat(what, "[", i, "]")));
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<PartitionSpec::Entry> EntryFromJson(const Json& e, absl::string_view what) {
  if (e.is_null()) return PartitionSpec::Entry{};
  if (e.is_string()) {
    if (e.get<std::string>().empty()) return InvalidArgument(what, " is an empty axis name");
    return PartitionSpec::Entry{e.get<std::string>()};
  }
  if (e.is_array()) {
    PartitionSpec::Entry out;
    for (size_t i = 0; i < e.size(); ++i) {
      if (!e[i].is_string() || e[i].get<std::string>().empty()) {
        return InvalidArgument(what, " must be null, an axis name or a list of axis names "
                               "(tuples may not nest), got ", Describe(e));
      }
      out.push_back(e[i].get<std::string>());
    }
    return out;
  }
  return InvalidArgument(what, " must be null, an axis name or a list of axis names, got ",
                         Describe(e));
}

absl::StatusOr<std::vector<std::string>> AsStringList(const Json& v, absl::string_view what) {
  if (!v.is_array()) return InvalidArgument(what, " must be a list of strings, got ", Describe(v));
  std::vector<std::string> out;
  for (const Json& s : v) {
    if (!s.is_string()) return InvalidArgument(what, " must be a list of strings, got ", Describe(v));
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

std::string Describe(const Json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

const char* FirstKey(const Json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (Field(obj, k) != nullptr) return k;
  }
  return nullptr;
}

absl::StatusOr<int64_t> GetInt(const Json& obj, const char* key, absl::string_view where) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  return AsInt(*v, absl::StrCat(where, ".", key));
}

absl::StatusOr<std::optional<int64_t>> GetOptInt(const Json& obj, const char* key,
                                                 absl::string_view where) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  MS_ASSIGN_OR_RETURN(int64_t x, AsInt(*v, absl::StrCat(where, ".", key)));
  return std::optional<int64_t>(x);
}

absl::StatusOr<std::vector<int64_t>> GetIntList(const Json& obj, const char* key,
                                                absl::string_view where, bool allow_scalar) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  return AsIntList(*v, absl::StrCat(where, ".", key), allow_scalar);
}

absl::StatusOr<std::optional<std::vector<int64_t>>> GetOptIntList(const Json& obj,
                                                                  const char* key,
                                                                  absl::string_view where,
                                                                  bool allow_scalar) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return std::optional<std::vector<int64_t>>();
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> x,
                      AsIntList(*v, absl::StrCat(where, ".", key), allow_scalar));
  return std::optional<std::vector<int64_t>>(std::move(x));
}

absl::StatusOr<std::string> GetString(const Json& obj, const char* key, absl::string_view where) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  if (!v->is_string()) {
    return InvalidArgument(where, ".", key, " must be a string, got ", Describe(*v));
  }
  return v->get<std::string>();
}

absl::StatusOr<std::optional<std::vector<std::string>>> GetOptStringList(
    const Json& obj, const char* key, absl::string_view where) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return std::optional<std::vector<std::string>>();
  MS_ASSIGN_OR_RETURN(std::vector<std::string> x, AsStringList(*v, absl::StrCat(where, ".", key)));
  return std::optional<std::vector<std::string>>(std::move(x));
}

absl::StatusOr<PartitionSpec> SpecFromJson(const Json& j, absl::string_view where) {
  if (j.is_null()) return PartitionSpec();
  if (j.is_string()) {
    absl::StatusOr<PartitionSpec> parsed = ParsePartitionSpec(j.get<std::string>());
    if (!parsed.ok()) return AnnotateStatus(parsed.status(), where);
    return parsed;
  }
  if (!j.is_array()) {
    return InvalidArgument(where, " must be a list of entries (null, \"axis\" or [\"a\", \"b\"]), got ",
                           Describe(j));
  }
  std::vector<PartitionSpec::Entry> entries;
  for (size_t i = 0; i < j.size(); ++i) {
    MS_ASSIGN_OR_RETURN(PartitionSpec::Entry e,
                        EntryFromJson(j[i], absl::StrCat(where, "[", i, "]")));
    entries.push_back(std::move(e));
  }
  return PartitionSpec(std::move(entries));
}

absl::StatusOr<std::optional<PartitionSpec>> OutShardingFromJson(const Json& j) {
  if (j.is_null()) return std::optional<PartitionSpec>();
  if (j.is_object()) {
    auto it = j.find("spec");
    PartitionSpec spec;
    if (it != j.end()) {
      MS_ASSIGN_OR_RETURN(spec, SpecFromJson(*it, "out_sharding.spec"));
    }
    std::vector<std::string> unreduced;
    auto u = j.find("unreduced");
    if (u != j.end() && !u->is_null()) {
      MS_ASSIGN_OR_RETURN(unreduced, AsStringList(*u, "out_sharding.unreduced"));
    }
    for (auto kv = j.begin(); kv != j.end(); ++kv) {
      if (kv.key() != "spec" && kv.key() != "unreduced") {
        return InvalidArgument("out_sharding has an unknown field '", kv.key(),
                               "' (want spec, unreduced)");
      }
    }
    return std::optional<PartitionSpec>(spec.WithUnreduced(std::move(unreduced)));
  }
  MS_ASSIGN_OR_RETURN(PartitionSpec spec, SpecFromJson(j, "out_sharding"));
  return std::optional<PartitionSpec>(std::move(spec));
}

absl::StatusOr<Mesh> MeshFromJson(const Json& mesh, const Json* axis_types) {
  if (mesh.is_null()) return Mesh();
  if (!mesh.is_object()) {
    return InvalidArgument("mesh must be an object {\"axis\": size, ...}, got ", Describe(mesh));
  }
  if (axis_types != nullptr && !axis_types->is_null() && !axis_types->is_object()) {
    return InvalidArgument("mesh_axis_types must be an object {\"axis\": \"Explicit\"|\"Auto\"|"
                           "\"Manual\"}, got ", Describe(*axis_types));
  }
  std::vector<MeshAxis> axes;
  for (auto it = mesh.begin(); it != mesh.end(); ++it) {
    MS_ASSIGN_OR_RETURN(int64_t size, AsInt(it.value(), absl::StrCat("mesh.", it.key())));
    MeshAxis axis{it.key(), size, AxisType::kExplicit};
    if (axis_types != nullptr && axis_types->is_object()) {
      auto t = axis_types->find(it.key());
      if (t != axis_types->end() && !t->is_null()) {
        if (!t->is_string()) {
          return InvalidArgument("mesh_axis_types.", it.key(), " must be a string, got ",
                                 Describe(*t));
        }
        MS_ASSIGN_OR_RETURN(axis.type, ParseAxisType(t->get<std::string>()),
                            "mesh_axis_types.", it.key());
      }
    }
    axes.push_back(std::move(axis));
  }
  if (axis_types != nullptr && axis_types->is_object()) {
    for (auto it = axis_types->begin(); it != axis_types->end(); ++it) {
      if (mesh.find(it.key()) == mesh.end()) {
        return InvalidArgument("mesh_axis_types names axis '", it.key(),
                               "' which is not in the mesh ", Describe(mesh));
      }
    }
  }
  return Mesh::Create(std::move(axes));
}

absl::StatusOr<ArrayType> InputFromJson(const Json& input, const Mesh& mesh, DType dtype,
                                        absl::string_view where) {
  if (!input.is_object()) {
    return InvalidArgument(where, " must be an object {\"shape\", \"spec\"}, got ", Describe(input));
  }
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, GetIntList(input, "shape", where));
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(where, ".shape has an invalid dim ", d, ": ", Describe(input["shape"]));
    }
    if (d != 0 && elements > kMaxElements / d) {
      return InvalidArgument(where, ".shape is too large: ", Describe(input["shape"]));
    }
    elements *= d;
  }
  PartitionSpec spec;
  auto s = input.find("spec");
  if (s != input.end()) {
    MS_ASSIGN_OR_RETURN(spec, SpecFromJson(*s, absl::StrCat(where, ".spec")));
  }
  MS_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> unreduced,
                      GetOptStringList(input, "unreduced", where));
  if (unreduced.has_value()) spec = spec.WithUnreduced(*unreduced);
  if (const Json* dt = Field(input, "dtype")) {
    if (!dt->is_string()) return InvalidArgument(where, ".dtype must be a string, got ", Describe(*dt));
    MS_ASSIGN_OR_RETURN(dtype, ParseDType(dt->get<std::string>()), where, ".dtype");
  }
  MS_ASSIGN_OR_RETURN(ArrayType type, MakeArrayType(dtype, std::move(shape), mesh, spec), where);
  MS_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> varying,
                      GetOptStringList(input, "varying", where));
  if (varying.has_value()) {
    for (const std::string& v : *varying) {
      if (!mesh.AxisIndex(v).has_value()) {
        return InvalidArgument(where, ".varying names axis '", v, "' which is not in ",
                               mesh.ToString());
      }
    }
    type.varying = *varying;
  }
  return type;
}

}  // namespace rules_case
}  // namespace meshserve
