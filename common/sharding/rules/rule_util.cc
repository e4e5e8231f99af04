#include "common/sharding/rules/rule_util.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"

namespace meshserve {
namespace rules {
namespace {

bool IsExplicit(const Mesh& mesh, absl::string_view axis) {
  std::optional<int> i = mesh.AxisIndex(axis);
  return i.has_value() && mesh.axis(*i).type == AxisType::kExplicit;
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
    for (const ArrayType* t : operands) ins.push_back(t->ToString(/*short_dtype=*/true));
    return InvalidArgument(prim, " operation with inputs: ", absl::StrJoin(ins, ", "),
                           " produces an illegally sharded result: ",
                           TypeStringFromParts(dtype, shape, mesh, entries, unreduced,
                                               varying, /*short_dtype=*/true));
  }
  MS_ASSIGN_OR_RETURN(
      ArrayType out,
      MakeArrayType(dtype, std::move(shape), mesh,
                    PartitionSpec(std::move(entries), InMeshOrder(mesh, std::move(unreduced)))),
      prim);
  out.varying = std::move(varying);
  return out;
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
                             operand.ToString(/*short_dtype=*/true), " and output shape=",
                             PyTupleRepr(out_shape));
    }
  }
  return in;
}

absl::Status CheckResultShape(absl::string_view prim, absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || !CheckedMul(n, d, &n) || n > (int64_t{1} << 62)) {
      return InvalidArgument(prim, ": result shape ", PyTupleRepr(shape),
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

std::vector<const ArrayType*> Pointers(absl::Span<const ArrayType> operands) {
  std::vector<const ArrayType*> p;
  p.reserve(operands.size());
  for (const ArrayType& t : operands) p.push_back(&t);
  return p;
}

bool IsIntegerDType(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kInt8 ||
         dtype == DType::kUInt8;
}

}  // namespace rules
}  // namespace meshserve
