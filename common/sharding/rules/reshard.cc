#include "common/sharding/rules/reshard.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

absl::Status CheckAxesExist(const Mesh& mesh, const std::vector<std::string>& axes,
                            absl::string_view what) {
  for (const std::string& a : axes) {
    if (!mesh.AxisIndex(a).has_value()) {
      return InvalidArgument(what, ": axis '", a, "' is not in mesh ", mesh.ToString());
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> AllAxes(const Mesh& mesh) {
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh.axes()) names.push_back(a.name);
  return names;
}

}  // namespace

absl::StatusOr<ArrayType> ReshardRule(const ArrayType& operand,
                                      const std::optional<PartitionSpec>& out_sharding) {
  if (!out_sharding.has_value()) {
    return InvalidArgument("Reshard should only be used with out_shardings which are non-None. "
                           "Got out_shardings=None for input type ",
                           operand.ToString(true));
  }
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("reshard", ptrs));
  MS_ASSIGN_OR_RETURN(PartitionSpec out,
                      rules::ParseOutSharding("reshard", mesh, *out_sharding, operand.rank()));
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, operand.shape, mesh, ptrs);
  return rules::FinishResult("reshard", ptrs, operand.dtype, operand.shape, mesh, out.entries(),
                             out.unreduced());
}

absl::StatusOr<ArrayType> AutoAxesRule(absl::Span<const ArrayType> operands,
                                       const std::optional<PartitionSpec>& out_sharding,
                                       const std::optional<std::vector<std::string>>& axes,
                                       const InnerOpFn& inner) {
  if (!out_sharding.has_value()) {
    return InvalidArgument("Missing required keyword argument: 'out_sharding'");
  }
  std::vector<const ArrayType*> ptrs;
  for (const ArrayType& t : operands) ptrs.push_back(&t);
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("auto_axes", ptrs));
  std::vector<std::string> auto_axes = axes.has_value() ? *axes : AllAxes(mesh);
  MS_RETURN_IF_ERROR(CheckAxesExist(mesh, auto_axes, "auto_axes"));
  for (const std::string& a : auto_axes) {
    if (mesh.axis(*mesh.AxisIndex(a)).type == AxisType::kManual) {
      return Unimplemented("Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is "
                           "not allowed. Got axis '", a, "' in auto_axes");
    }
  }
  const Mesh inner_mesh = mesh.WithAxisTypes(auto_axes, AxisType::kAuto);
  std::vector<ArrayType> args;
  for (const ArrayType& t : operands) {
    Entries e = rules::ExplicitEntries(t);
    for (Entry& entry : e) {
      entry.erase(std::remove_if(entry.begin(), entry.end(),
                                 [&](const std::string& a) {
                                   return std::count(auto_axes.begin(), auto_axes.end(), a) > 0;
                                 }),
                  entry.end());
    }
    MS_ASSIGN_OR_RETURN(ArrayType arg, MakeArrayType(t.dtype, t.shape, inner_mesh,
                                                     PartitionSpec(std::move(e))));
    arg.varying = t.varying;
    args.push_back(std::move(arg));
  }
  MS_ASSIGN_OR_RETURN(ArrayType body, inner(args), "inside auto_axes");
  MS_ASSIGN_OR_RETURN(PartitionSpec out,
                      rules::ParseOutSharding("auto_axes", mesh, *out_sharding, body.rank()));
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(body.dtype, body.shape, mesh, ptrs);
  return rules::FinishResult("auto_axes", ptrs, body.dtype, body.shape, mesh, out.entries(),
                             out.unreduced());
}

absl::StatusOr<ArrayType> ShardMapBodyTypeRule(
    const ArrayType& operand, const std::optional<std::vector<std::string>>& manual_axes) {
  const Mesh& mesh = operand.sharding.mesh();
  if (mesh.empty()) {
    return InvalidArgument("shard_map requires a mesh with at least one axis");
  }
  std::vector<std::string> manual = manual_axes.has_value() ? *manual_axes : AllAxes(mesh);
  MS_RETURN_IF_ERROR(CheckAxesExist(mesh, manual, "shard_map axis_names"));
  absl::flat_hash_set<std::string> manual_set(manual.begin(), manual.end());
  const Mesh body_mesh = mesh.WithAxisTypes(manual, AxisType::kManual);
  Shape shape = operand.shape;
  Entries entries(operand.rank());
  std::vector<std::string> varying = operand.varying;
  for (int d = 0; d < operand.rank(); ++d) {
    int64_t k = 1;
    for (const std::string& a : operand.spec().entry(d)) {
      if (manual_set.contains(a)) {
        k *= rules::EntrySize(mesh, {a});
        varying.push_back(a);
      } else {
        entries[d].push_back(a);
      }
    }
    if (shape[d] % k != 0) {
      return InvalidArgument("shard_map in_specs ", operand.spec().ToString(),
                             " imply that array axis ", d, " is split into ", k,
                             " parts, which does not evenly divide the dimension size ",
                             shape[d]);
    }
    shape[d] /= k;
  }
  MS_ASSIGN_OR_RETURN(ArrayType out, MakeArrayType(operand.dtype, std::move(shape), body_mesh,
                                                   PartitionSpec(std::move(entries))));
  // Varying axes in mesh order, without repeats.
  ArrayType with_varying = operand;
  with_varying.varying = std::move(varying);
  const ArrayType* vptrs[] = {&with_varying};
  out.varying = rules::UnionVarying(mesh, vptrs);
  return out;
}

}  // namespace meshserve
