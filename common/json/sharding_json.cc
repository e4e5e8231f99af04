#include "common/json/sharding_json.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {
namespace {

// One list entry: null, "axis" or ["a", "b"].
absl::StatusOr<PartitionSpec::Entry> EntryFromJson(const Json& e, size_t index,
                                                   const Json& list, absl::string_view path) {
  auto bad = [&](absl::string_view rule, const Json& got) {
    return InvalidArgument(path, " entry ", ShowJson(e), " in ", ShowJson(list), ": entry ",
                           index, " must ", rule, ", got ", ShowJson(got));
  };
  if (e.is_null()) return PartitionSpec::Entry{};
  if (e.is_string()) {
    if (e.get<std::string>().empty()) return bad("not be an empty axis name", e);
    return PartitionSpec::Entry{e.get<std::string>()};
  }
  if (!e.is_array()) return bad("be null, an axis name or a list of axis names", e);
  PartitionSpec::Entry entry;
  for (const Json& a : e) {
    if (!a.is_string() || a.get<std::string>().empty()) {
      return bad("name axes as non-empty strings (tuples may not nest)", a);
    }
    entry.push_back(a.get<std::string>());
  }
  return entry;
}

// A list of entries or a P(...) string.
absl::StatusOr<PartitionSpec> SpecListFromJson(const Json& j, absl::string_view path) {
  if (j.is_string()) {
    MS_ASSIGN_OR_RETURN(PartitionSpec spec, ParsePartitionSpec(j.get<std::string>()), path);
    return spec;
  }
  if (!j.is_array()) {
    return InvalidArgument(path,
                           " must be a list (a PartitionSpec), a P(...) string or "
                           "{\"spec\", \"unreduced\"}, got ",
                           ShowJson(j));
  }
  std::vector<PartitionSpec::Entry> entries;
  for (size_t i = 0; i < j.size(); ++i) {
    MS_ASSIGN_OR_RETURN(PartitionSpec::Entry entry, EntryFromJson(j[i], i, j, path));
    entries.push_back(std::move(entry));
  }
  return PartitionSpec(std::move(entries));
}

absl::StatusOr<AxisType> AxisTypeFromJson(const Json* types, const std::string& axis,
                                          absl::string_view types_path) {
  const Json* t = types == nullptr ? nullptr : FindJsonField(*types, axis);
  if (t == nullptr) return AxisType::kExplicit;
  const std::string path = absl::StrCat(types_path, ".", axis);
  MS_ASSIGN_OR_RETURN(std::string name, JsonString(*t, path));
  MS_ASSIGN_OR_RETURN(AxisType type, ParseAxisType(name), path);
  return type;
}

}  // namespace

absl::StatusOr<Mesh> MeshFromJson(const Json& j, absl::string_view path,
                                  const Json* axis_types, absl::string_view axis_types_path) {
  if (j.is_null()) return Mesh();
  if (!j.is_object()) {
    return InvalidArgument(path, " must be an object {\"axis\": size, ...}, got ", ShowJson(j));
  }
  if (axis_types != nullptr && axis_types->is_null()) axis_types = nullptr;
  if (axis_types != nullptr && !axis_types->is_object()) {
    return InvalidArgument(axis_types_path,
                           " must be an object {\"axis\": \"Explicit\"|\"Auto\"|\"Manual\"}, got ",
                           ShowJson(*axis_types));
  }
  std::vector<MeshAxis> axes;
  for (auto it = j.begin(); it != j.end(); ++it) {
    MS_ASSIGN_OR_RETURN(int64_t size, JsonInt(it.value(), absl::StrCat(path, ".", it.key())));
    MS_ASSIGN_OR_RETURN(AxisType type, AxisTypeFromJson(axis_types, it.key(), axis_types_path));
    axes.push_back(MeshAxis{it.key(), size, type});
  }
  if (axis_types != nullptr) {
    for (auto it = axis_types->begin(); it != axis_types->end(); ++it) {
      if (j.find(it.key()) == j.end()) {
        return InvalidArgument(axis_types_path, " names axis '", it.key(),
                               "' which is not in the mesh ", ShowJson(j));
      }
    }
  }
  MS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(std::move(axes)), path);
  return mesh;
}

absl::StatusOr<PartitionSpec> PartitionSpecFromJson(const Json& j, absl::string_view path) {
  if (j.is_null()) return PartitionSpec();
  if (!j.is_object()) return SpecListFromJson(j, path);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "spec" && it.key() != "unreduced") {
      return InvalidArgument(path, " ", ShowJson(j), ": unknown field '", it.key(),
                             "' (expected 'spec' and 'unreduced')");
    }
  }
  PartitionSpec spec;
  if (const Json* list = FindJsonField(j, "spec")) {
    MS_ASSIGN_OR_RETURN(spec, SpecListFromJson(*list, absl::StrCat(path, ".spec")));
  }
  std::vector<std::string> unreduced = spec.unreduced();
  if (const Json* u = FindJsonField(j, "unreduced")) {
    MS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        JsonStringList(*u, absl::StrCat(path, ".unreduced")));
    unreduced.insert(unreduced.end(), names.begin(), names.end());
  }
  return spec.WithUnreduced(std::move(unreduced));
}

Json PartitionSpecToJson(const PartitionSpec& spec) {
  Json list = Json::array();
  for (const PartitionSpec::Entry& e : spec.entries()) {  // None, an axis, or a tuple
    list.push_back(e.empty() ? Json(nullptr) : e.size() == 1 ? Json(e[0]) : Json(e));
  }
  if (spec.unreduced().empty()) return list;
  return Json{{"spec", std::move(list)}, {"unreduced", Json(spec.unreduced())}};
}

absl::StatusOr<ReshardEndpoint> ReshardEndpointFromJson(const Json& j, absl::string_view path,
                                                        absl::Span<const int64_t> shape,
                                                        DType dtype) {
  MS_ASSIGN_OR_RETURN(const Json* mesh_json, RequiredJsonField(j, "mesh", path));
  MS_ASSIGN_OR_RETURN(Mesh mesh, MeshFromJson(*mesh_json, absl::StrCat(path, ".mesh")));
  MS_ASSIGN_OR_RETURN(const Json* spec_json, RequiredJsonField(j, "spec", path));
  MS_ASSIGN_OR_RETURN(PartitionSpec spec,
                      PartitionSpecFromJson(*spec_json, absl::StrCat(path, ".spec")));
  if (const Json* u = FindJsonField(j, "unreduced")) {
    MS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        JsonStringList(*u, absl::StrCat(path, ".unreduced")));
    std::vector<std::string> all = spec.unreduced();
    all.insert(all.end(), names.begin(), names.end());
    spec = spec.WithUnreduced(std::move(all));
  }
  MS_ASSIGN_OR_RETURN(
      ArrayType type,
      MakeArrayType(dtype, std::vector<int64_t>(shape.begin(), shape.end()), mesh, spec), path);
  ReshardEndpoint endpoint;
  endpoint.sharding = type.sharding;
  const Json* devices = FindJsonField(j, "devices");
  if (devices == nullptr) {
    endpoint.device_workers = OneWorkerPerDevice(mesh);
    return endpoint;
  }
  MS_ASSIGN_OR_RETURN(endpoint.device_workers,
                      JsonIntList(*devices, absl::StrCat(path, ".devices")));
  if (static_cast<int64_t>(endpoint.device_workers.size()) != mesh.num_devices()) {
    return InvalidArgument(path, ".devices ", ShowJson(*devices), " has ",
                           endpoint.device_workers.size(), " entries but ", mesh.ToString(),
                           " has ", mesh.num_devices(), " devices");
  }
  return endpoint;
}

}  // namespace meshserve
