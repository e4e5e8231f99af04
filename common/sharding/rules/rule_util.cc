#include "common/sharding/rules/rule_util.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace rules {
namespace {

bool IsExplicit(const Mesh& mesh, absl::string_view axis) {
  std::optional<int> i = mesh.AxisIndex(axis);
  return i.has_value() && mesh.axis(*i).type == AxisType::kExplicit;
}

// Axis names of `axes` sorted by mesh order (unknown names last, by name).
std::vector<std::string> InMeshOrder(const Mesh& mesh, std::vector<std::string> axes) {
  std::sort(axes.begin(), axes.end(), [&](const std::string& a, const std::string& b) {
    std::optional<int> ia = mesh.AxisIndex(a), ib = mesh.AxisIndex(b);
    int ka = ia.value_or(mesh.num_axes()), kb = ib.value_or(mesh.num_axes());
    return ka != kb ? ka < kb : a < b;
  });
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

std::string AxisSetString(absl::Span<const std::string> axes) {
  if (axes.size() == 1) return axes[0];
  return absl::StrCat("(", absl::StrJoin(axes, ","), ")");
}

std::string MeshAxisNamesRepr(const Mesh& mesh) {
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh.axes()) names.push_back(absl::StrCat("'", a.name, "'"));
  if (names.size() == 1) return absl::StrCat("(", names[0], ",)");
  return absl::StrCat("(", absl::StrJoin(names, ", "), ")");
}

}  // namespace

bool RulesActive(const Mesh& mesh) {
  for (const MeshAxis& a : mesh.axes()) {
    if (a.type == AxisType::kExplicit) return true;
  }
  return false;
}

Entries ExplicitEntries(const ArrayType& type) {
  Entries out(type.shape.size());
  const Mesh& mesh = type.sharding.mesh();
  for (int d = 0; d < type.rank(); ++d) {
    if (d >= type.spec().size()) break;
    for (const std::string& axis : type.spec().entries()[d]) {
      if (IsExplicit(mesh, axis)) out[d].push_back(axis);
    }
  }
  return out;
}

int64_t EntrySize(const Mesh& mesh, const Entry& entry) {
  int64_t size = 1;
  for (const std::string& axis : entry) {
    std::optional<int> i = mesh.AxisIndex(axis);
    if (i.has_value()) size *= mesh.axis(*i).size;
  }
  return size;
}

absl::StatusOr<Mesh> CommonMesh(absl::string_view prim,
                                absl::Span<const ArrayType* const> operands) {
  const Mesh* mesh = nullptr;
  for (const ArrayType* t : operands) {
    const Mesh& m = t->sharding.mesh();
    if (m.empty()) continue;
    if (mesh != nullptr && !(*mesh == m)) {
      if (prim == "dot_general") {
        return InvalidArgument("Mesh of both lhs and rhs should match. Got lhs: ",
                               mesh->ToString(), " and rhs: ", m.ToString());
      }
      return InvalidArgument(prim, ": Mesh for all inputs should be equal. Got one mesh: ",
                             mesh->ToString(), " and another mesh: ", m.ToString());
    }
    mesh = &m;
  }
  return mesh == nullptr ? Mesh() : *mesh;
}

absl::StatusOr<PartitionSpec> ParseOutSharding(absl::string_view prim,
                                               const Mesh& mesh,
                                               const PartitionSpec& out_sharding,
                                               int rank) {
  if (mesh.empty()) {
    return InvalidArgument(
        "Using PartitionSpec when you are not under a mesh context is not allowed. "
        "Please pass a NamedSharding instance or enter into a mesh context via "
        "`jax.set_mesh`. Got ",
        out_sharding.ToString(), " as `out_sharding` of ", prim);
  }
  std::vector<std::string> all = out_sharding.AxesUsed();
  all.insert(all.end(), out_sharding.unreduced().begin(), out_sharding.unreduced().end());
  for (const std::string& axis : all) {
    std::optional<int> i = mesh.AxisIndex(axis);
    if (!i.has_value()) {
      return InvalidArgument("Resource axis: ", axis, " of ", out_sharding.ToString(),
                             " is not found in mesh: ", MeshAxisNamesRepr(mesh), ".");
    }
    if (mesh.axis(*i).type != AxisType::kExplicit) {
      return InvalidArgument("PartitionSpec passed to ", prim,
                             " cannot contain axis names that are of type Auto or "
                             "Manual. Got PartitionSpec: ",
                             out_sharding.ToString(), " with axis name: ", axis,
                             " of type: ", AxisTypeName(mesh.axis(*i).type));
    }
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& axis : out_sharding.AxesUsed()) {
    if (!seen.insert(axis).second) {
      return InvalidArgument(
          "A single NamedSharding spec specification can map every mesh axis to at "
          "most one positional dimension, but ",
          out_sharding.ToString(), " has duplicate entries for `", axis, "`");
    }
  }
  absl::flat_hash_set<std::string> unreduced_seen;
  for (const std::string& axis : out_sharding.unreduced()) {
    if (seen.contains(axis)) {
      return InvalidArgument("unreduced axes should be disjoint from the axes in the "
                             "partitions of ", out_sharding.ToString(), ": `", axis,
                             "` is in both");
    }
    unreduced_seen.insert(axis);
  }
  if (out_sharding.size() > rank) {
    return InvalidArgument("Length of sharding.spec (", out_sharding.size(),
                           ") must be equal to aval's ndim (", rank, "). Got ",
                           out_sharding.ToString(), " as `out_sharding` of ", prim);
  }
  std::vector<std::string> unreduced(unreduced_seen.begin(), unreduced_seen.end());
  return out_sharding.PaddedTo(rank).WithUnreduced(InMeshOrder(mesh, unreduced));
}

std::vector<std::string> UnionVarying(const Mesh& mesh,
                                      absl::Span<const ArrayType* const> operands) {
  std::vector<std::string> all;
  for (const ArrayType* t : operands) all.insert(all.end(), t->varying.begin(), t->varying.end());
  return InMeshOrder(mesh, std::move(all));
}

absl::StatusOr<ArrayType> UnshardedResult(DType dtype, Shape shape, const Mesh& mesh,
                                          absl::Span<const ArrayType* const> operands) {
  MS_RETURN_IF_ERROR(CheckResultShape("result", shape));
  std::vector<std::string> varying = UnionVarying(mesh, operands);
  MS_ASSIGN_OR_RETURN(ArrayType out, MakeArrayType(dtype, std::move(shape), mesh, PartitionSpec()));
  out.varying = std::move(varying);
  return out;
}

absl::StatusOr<ArrayType> FinishResult(absl::string_view prim,
                                       absl::Span<const ArrayType* const> operands,
                                       DType dtype, Shape shape, const Mesh& mesh,
                                       Entries entries,
                                       std::vector<std::string> unreduced) {
  MS_RETURN_IF_ERROR(CheckResultShape(prim, shape));
  entries.resize(shape.size());
  absl::flat_hash_set<std::string> seen;
  bool duplicate = false;
  for (const Entry& e : entries) {
    for (const std::string& axis : e) duplicate |= !seen.insert(axis).second;
  }
  std::vector<std::string> varying = UnionVarying(mesh, operands);
  if (duplicate) {
    std::vector<std::string> ins;
    for (const ArrayType* t : operands) ins.push_back(ShortTypeString(*t));
    return InvalidArgument(prim, " operation with inputs: ", absl::StrJoin(ins, ", "),
                           " produces an illegally sharded result: ",
                           TypeString(dtype, shape, mesh, entries, unreduced, varying,
                                      /*short_dtype=*/true));
  }
  MS_ASSIGN_OR_RETURN(
      ArrayType out,
      MakeArrayType(dtype, std::move(shape), mesh,
                    PartitionSpec(std::move(entries), InMeshOrder(mesh, std::move(unreduced)))),
      prim);
  out.varying = std::move(varying);
  return out;
}

std::string TypeString(DType dtype, absl::Span<const int64_t> shape, const Mesh& mesh,
                       const Entries& entries, absl::Span<const std::string> unreduced,
                       absl::Span<const std::string> varying, bool short_dtype) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<std::string> axes;
    if (d < entries.size()) {
      for (const std::string& a : entries[d]) {
        if (IsExplicit(mesh, a)) axes.push_back(a);
      }
    }
    if (axes.empty()) {
      dims.push_back(absl::StrCat(shape[d]));
    } else {
      dims.push_back(absl::StrCat(shape[d], "@", AxisSetString(axes)));
    }
  }
  std::string out = absl::StrCat(short_dtype ? DTypeShortName(dtype) : DTypeName(dtype), "[",
                                 absl::StrJoin(dims, ","), "]");
  std::vector<std::string> parts;
  std::vector<std::string> v = InMeshOrder(mesh, {varying.begin(), varying.end()});
  if (!v.empty()) parts.push_back(absl::StrCat("V:", AxisSetString(v)));
  std::vector<std::string> u;
  for (const std::string& a : unreduced) {
    if (IsExplicit(mesh, a)) u.push_back(a);
  }
  u = InMeshOrder(mesh, std::move(u));
  if (!u.empty()) parts.push_back(absl::StrCat("U:", AxisSetString(u)));
  if (!parts.empty()) absl::StrAppend(&out, "{", absl::StrJoin(parts, ", "), "}");
  return out;
}

std::string ShortTypeString(const ArrayType& type) {
  // A validated type prints itself; TypeString above is only for specs that
  // cannot be an ArrayType (the illegal results named in errors).
  return type.ToString(/*short_dtype=*/true);
}

std::string EntryRepr(const Entry& entry) {
  if (entry.empty()) return "None";
  if (entry.size() == 1) return absl::StrCat("'", entry[0], "'");
  std::vector<std::string> q;
  for (const std::string& a : entry) q.push_back(absl::StrCat("'", a, "'"));
  return absl::StrCat("(", absl::StrJoin(q, ", "), ")");
}

std::string EntriesTupleRepr(const Entries& entries) {
  std::vector<std::string> parts;
  for (const Entry& e : entries) parts.push_back(EntryRepr(e));
  if (parts.size() == 1) return absl::StrCat("(", parts[0], ",)");
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

std::string ShapeRepr(absl::Span<const int64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<Entries> VaryingOutShapeEntries(absl::string_view name, const Mesh& mesh,
                                               const ArrayType& operand,
                                               absl::Span<const int64_t> out_shape) {
  const Entries in = ExplicitEntries(operand);
  for (int d = 0; d < operand.rank() && d < static_cast<int>(out_shape.size()); ++d) {
    if (in[d].empty() || operand.shape[d] == out_shape[d]) continue;
    int64_t k = EntrySize(mesh, in[d]);
    if (out_shape[d] % k != 0) {
      return InvalidArgument(name, " on sharded dims where out dim (", out_shape[d],
                             ") is not divisible by mesh axes (", k, ") with spec (",
                             EntryRepr(in[d]), ") is not implemented. Got input type=",
                             ShortTypeString(operand), " and output shape=",
                             ShapeRepr(out_shape));
    }
  }
  return in;
}

absl::Status CheckResultShape(absl::string_view prim, absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || !CheckedMul(n, d, &n) || n > (int64_t{1} << 62)) {
      return InvalidArgument(prim, ": result shape ", ShapeRepr(shape),
                             " is invalid or too large");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CanonicalizeDim(int64_t dim, int rank, absl::string_view what) {
  if (dim < -rank || dim >= rank) {
    return InvalidArgument(what, " ", dim, " is out of bounds for array of rank ", rank);
  }
  return static_cast<int>(dim < 0 ? dim + rank : dim);
}

}  // namespace rules
}  // namespace meshserve
