// The search space of `meshserve suggest` (layout_space.h): roles, options,
// named baselines and materialization into a model file.
#include "server/suggest/layout_space.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/typed_model.h"

namespace meshserve {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Every placement of at most one D and at most one M over `rank` dims (one
// axis only when `has_model` is false); the all-None one first.
std::vector<RoleOption> SpecOptions(int rank, bool has_model) {
  std::vector<RoleOption> out;
  const std::vector<AxisRole> none(rank, AxisRole::kNone);
  out.push_back({RoleOption::kSpec, none});
  for (AxisRole a : {AxisRole::kData, AxisRole::kModel}) {
    if (a == AxisRole::kModel && !has_model) continue;
    for (int i = 0; i < rank; ++i) {
      std::vector<AxisRole> dims = none;
      dims[i] = a;
      out.push_back({RoleOption::kSpec, dims});
    }
  }
  if (!has_model) return out;
  for (int i = 0; i < rank; ++i) {
    for (int j = 0; j < rank; ++j) {
      if (i == j) continue;
      std::vector<AxisRole> dims = none;
      dims[i] = AxisRole::kData;
      dims[j] = AxisRole::kModel;
      out.push_back({RoleOption::kSpec, dims});
    }
  }
  return out;
}

// Role index by key, appending a new role of `kind` when unseen.
int RoleFor(LayoutSpace& space, std::map<std::string, int>& by_key, Role::Kind kind,
            const std::string& key) {
  auto [it, inserted] = by_key.emplace(key, static_cast<int>(space.roles.size()));
  if (inserted) space.roles.push_back(Role{kind, key, {}, {}});
  return it->second;
}

std::vector<Mesh> CandidateMeshes(const ModelFile& model, const LayoutSpace& space,
                                  int64_t n) {
  std::vector<Mesh> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    if (space.model_axis.empty() && d != n) continue;
    std::vector<MeshAxis> axes;
    for (const auto& [name, size] : model.mesh_axes) {
      int64_t s = name == space.data_axis ? d : name == space.model_axis ? n / d : 1;
      axes.push_back(MeshAxis{name, s});
    }
    absl::StatusOr<Mesh> mesh = Mesh::Create(axes);
    if (mesh.ok()) out.push_back(*std::move(mesh));
  }
  return out;
}

// Each linear / einsum layer's out role, and which roles' params it reads.
void AddOutRoles(const ModelFile& model, LayoutSpace& space, std::map<std::string, int>& by_key,
                 const std::map<std::string, int>& param_role) {
  space.coupled.resize(space.roles.size());
  for (const LayerDef& l : model.layers) {
    if (!ModelOpIsDot(l.kind)) continue;
    const int r = RoleFor(space, by_key, Role::kOut, absl::StrCat("out:", RoleKey(l.name)));
    Role& role = space.roles[r];
    role.members.push_back(l.name);
    if (role.options.empty() || (l.out_sharding.has_value() &&
                                 role.options[0].kind != RoleOption::kFile)) {
      role.options.clear();
      if (l.out_sharding.has_value()) role.options.push_back({RoleOption::kFile, {}});
      role.options.push_back({RoleOption::kAbsent, {}});
      role.options.push_back({RoleOption::kBatch, {}});
      if (!space.model_axis.empty()) role.options.push_back({RoleOption::kBatchLastModel, {}});
    }
    space.coupled.resize(space.roles.size());
    std::vector<std::string> reads = l.inputs;
    for (const std::string* p : {&l.kernel, &l.bias}) {
      if (!p->empty()) reads.push_back(*p);
    }
    for (const std::string& name : reads) {
      auto it = param_role.find(name);
      if (it == param_role.end()) continue;
      std::vector<int>& c = space.coupled[it->second];
      if (std::find(c.begin(), c.end(), r) == c.end()) c.push_back(r);
    }
  }
}

// Every value's rank, from the file's own layout typed on a mesh of size-1
// axes (every spec divides) at `shapes`, or at request dims of 1 if none.
absl::Status FillValueRanks(const ModelFile& model, const ShapeSet* given, LayoutSpace& space) {
  std::vector<MeshAxis> axes;
  for (const auto& axis : model.mesh_axes) axes.push_back(MeshAxis{axis.first, 1});
  MS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(axes));
  ShapeSet shapes;
  for (const InputDef& in : model.inputs) {
    std::vector<int64_t> dims = in.shape;
    for (int64_t& d : dims) d = d == -1 ? 1 : d;
    shapes[in.name] = dims;
  }
  if (given != nullptr) shapes = *given;
  MS_ASSIGN_OR_RETURN(TypedModel typed, TypeModel(model, mesh, shapes),
                      "typing the model as written");
  for (const auto& [name, type] : typed.types) space.value_ranks[name] = type.rank();
  return absl::OkStatus();
}

}  // namespace

std::string RoleOption::ToString() const {
  switch (kind) {
    case kFile: return "file";
    case kAbsent: return "none";
    case kBatch: return "batch";
    case kBatchLastModel: return "batch+M";
    case kReplicated: return "replicated";
    case kSpec: break;
  }
  std::vector<std::string> parts;
  for (AxisRole a : dims) {
    parts.push_back(a == AxisRole::kNone ? "None" : a == AxisRole::kData ? "D" : "M");
  }
  return absl::StrCat("P(", absl::StrJoin(parts, ", "), ")");
}

double LayoutSpace::NumLayouts() const {
  double n = 1;
  for (const Role& r : roles) n *= static_cast<double>(r.options.size());
  return n;
}

std::string RoleKey(absl::string_view name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  for (std::string& p : parts) {
    if (AllDigits(p)) p = "#";
  }
  return absl::StrJoin(parts, ".");
}

absl::StatusOr<LayoutSpace> BuildLayoutSpace(const ModelFile& model, int64_t num_devices,
                                             const ShapeSet* shapes) {
  if (num_devices < 1) {
    return InvalidArgument("workers must be >= 1, got ", num_devices);
  }
  if (model.mesh_axes.empty()) {
    return InvalidArgument("model '", model.name, "' has no mesh axes to shard over");
  }
  LayoutSpace space;
  space.data_axis = model.mesh_axes.front().first;
  if (!model.inputs.empty() && !model.inputs.front().sharding.entry(0).empty()) {
    space.data_axis = model.inputs.front().sharding.entry(0).front();
  }
  for (const auto& axis : model.mesh_axes) {
    if (axis.first != space.data_axis) {
      space.model_axis = axis.first;
      break;
    }
  }
  const bool has_model = !space.model_axis.empty();
  std::map<std::string, int> by_key;
  space.roles.push_back(Role{Role::kInputs, "inputs", {}, {}});
  for (const InputDef& in : model.inputs) space.roles[0].members.push_back(in.name);
  space.roles[0].options = {{RoleOption::kFile, {}}, {RoleOption::kBatch, {}},
                            {RoleOption::kReplicated, {}}};
  std::map<std::string, int> param_role;
  const bool any_auto = std::any_of(model.params.begin(), model.params.end(),
                                    [](const ParamDef& p) { return p.auto_sharding; });
  for (const ParamDef& p : model.params) {
    const int rank = static_cast<int>(p.shape.size());
    const int r = RoleFor(space, by_key, Role::kParam, RoleKey(p.name));
    Role& role = space.roles[r];
    const bool fixed = any_auto && !p.auto_sharding;  // kept as written
    if (role.options.empty()) {
      role.options = fixed ? std::vector<RoleOption>{{RoleOption::kFile,
                                                      std::vector<AxisRole>(rank, AxisRole::kNone)}}
                           : SpecOptions(rank, has_model);
    }
    if (!role.members.empty() && (role.options[0].kind == RoleOption::kFile) != fixed) {
      return InvalidArgument("params '", role.members.front(), "' and '", p.name,
                             "' share the role '", role.key,
                             "' but only one has sharding \"auto\"");
    }
    if (static_cast<int>(role.options[0].dims.size()) != rank) {
      return InvalidArgument("params '", role.members.front(), "' and '", p.name,
                             "' share the role '", role.key, "' but differ in rank");
    }
    role.members.push_back(p.name);
    param_role[p.name] = r;
  }
  AddOutRoles(model, space, by_key, param_role);
  MS_RETURN_IF_ERROR(FillValueRanks(model, shapes, space));
  space.meshes = CandidateMeshes(model, space, num_devices);
  if (space.meshes.empty()) {
    return InvalidArgument("no mesh of ", num_devices, " devices over the model's axes");
  }
  return space;
}

ModelFile Materialize(const ModelFile& model, const LayoutSpace& space, const Layout& layout,
                      const Mesh& mesh) {
  ModelFile m = model;
  for (auto& [name, size] : m.mesh_axes) {
    for (const MeshAxis& a : mesh.axes()) {
      if (a.name == name) size = a.size;
    }
  }
  auto axis_of = [&](AxisRole a) {
    return a == AxisRole::kNone ? PartitionSpec::Entry{}
           : a == AxisRole::kData ? PartitionSpec::Entry{space.data_axis}
                                  : PartitionSpec::Entry{space.model_axis};
  };
  std::map<std::string, const RoleOption*> chosen;
  for (size_t r = 0; r < space.roles.size(); ++r) {
    for (const std::string& member : space.roles[r].members) {
      chosen[member] = &space.roles[r].options[layout[r]];
    }
  }
  const RoleOption& inputs = space.roles[0].options[layout[0]];
  for (InputDef& in : m.inputs) {
    if (inputs.kind == RoleOption::kBatch) {
      in.sharding = PartitionSpec({{space.data_axis}});
    } else if (inputs.kind == RoleOption::kReplicated) {
      in.sharding = PartitionSpec();
    }
  }
  const PartitionSpec::Entry batch =
      m.inputs.empty() ? PartitionSpec::Entry{} : m.inputs.front().sharding.entry(0);
  for (ParamDef& p : m.params) {
    if (chosen[p.name]->kind == RoleOption::kFile) continue;  // explicit, others "auto"
    p.auto_sharding = false;
    std::vector<PartitionSpec::Entry> entries;
    for (AxisRole a : chosen[p.name]->dims) entries.push_back(axis_of(a));
    while (!entries.empty() && entries.back().empty()) entries.pop_back();
    p.sharding = PartitionSpec(std::move(entries));
  }
  for (LayerDef& l : m.layers) {
    auto it = chosen.find(l.name);
    if (it == chosen.end() || it->second->kind == RoleOption::kFile) continue;
    const RoleOption::Kind kind = it->second->kind;
    if (kind == RoleOption::kAbsent) {
      l.out_sharding.reset();
      continue;
    }
    auto rank = space.value_ranks.find(l.name);
    std::vector<PartitionSpec::Entry> entries(
        std::max(rank == space.value_ranks.end() ? 1 : rank->second, 1));
    entries[0] = batch;
    if (kind == RoleOption::kBatchLastModel) entries.back() = {space.model_axis};
    while (!entries.empty() && entries.back().empty()) entries.pop_back();
    l.out_sharding = PartitionSpec(std::move(entries));
  }
  return m;
}

std::string LayoutKey(const ModelFile& materialized, const Mesh& mesh) {
  auto strip = [&](const PartitionSpec& spec) {
    std::vector<PartitionSpec::Entry> entries;
    for (const PartitionSpec::Entry& e : spec.entries()) {
      PartitionSpec::Entry kept;
      for (const std::string& a : e) {
        for (const MeshAxis& m : mesh.axes()) {
          if (m.name == a && m.size > 1) kept.push_back(a);
        }
      }
      entries.push_back(kept);
    }
    while (!entries.empty() && entries.back().empty()) entries.pop_back();
    return PartitionSpec(entries, spec.unreduced()).ToString();
  };
  std::string key = mesh.ToString();
  for (const InputDef& in : materialized.inputs) absl::StrAppend(&key, ";", in.name, "=", strip(in.sharding));
  for (const ParamDef& p : materialized.params) absl::StrAppend(&key, ";", p.name, "=", strip(p.sharding));
  for (const LayerDef& l : materialized.layers) {
    if (l.out_sharding.has_value()) absl::StrAppend(&key, ";", l.name, ">", strip(*l.out_sharding));
  }
  return key;
}

}  // namespace meshserve
