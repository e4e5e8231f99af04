#include "common/sharding/rules/layout_ops.h"

#include <algorithm>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

// Result on the operand's mesh: P() when rules are skipped.
absl::StatusOr<ArrayType> Result(absl::string_view prim, const ArrayType& operand,
                                 Shape shape, Entries entries) {
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(prim, ptrs));
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(operand.dtype, std::move(shape), mesh, ptrs);
  }
  return rules::FinishResult(prim, ptrs, operand.dtype, std::move(shape), mesh,
                             std::move(entries), operand.spec().unreduced());
}

}  // namespace

absl::StatusOr<ArrayType> TransposeRule(const ArrayType& operand,
                                        const std::vector<int64_t>& perm) {
  std::vector<bool> seen(operand.rank(), false);
  bool ok = static_cast<int>(perm.size()) == operand.rank();
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < operand.rank() && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok) {
    return InvalidArgument(
        "transpose permutation isn't a permutation of operand dimensions, got permutation ",
        PyTupleRepr(perm), " for operand shape ", PyTupleRepr(operand.shape), ".");
  }
  Entries in = rules::ExplicitEntries(operand), out;
  Shape shape;
  for (int64_t p : perm) {
    out.push_back(in[p]);
    shape.push_back(operand.shape[p]);
  }
  return Result("transpose", operand, std::move(shape), std::move(out));
}

absl::StatusOr<ArrayType> SqueezeRule(const ArrayType& operand,
                                      const std::optional<std::vector<int64_t>>& dimensions) {
  std::vector<bool> drop(operand.rank(), false);
  if (dimensions.has_value()) {
    for (int64_t d : *dimensions) {
      MS_ASSIGN_OR_RETURN(int dim, rules::CanonicalizeDim(d, operand.rank(), "squeeze axis"));
      if (drop[dim]) {
        return InvalidArgument("squeeze dimensions must be unique, got ",
                               PyTupleRepr(*dimensions));
      }
      if (operand.shape[dim] != 1) {
        return InvalidArgument(
            "cannot select an axis to squeeze out which has size not equal to one, got "
            "shape=", PyTupleRepr(operand.shape), " and dimensions=",
            PyTupleRepr(*dimensions));
      }
      drop[dim] = true;
    }
  } else {
    for (int d = 0; d < operand.rank(); ++d) drop[d] = operand.shape[d] == 1;
  }
  Entries in = rules::ExplicitEntries(operand), out;
  Shape shape;
  for (int d = 0; d < operand.rank(); ++d) {
    if (drop[d]) continue;
    out.push_back(in[d]);
    shape.push_back(operand.shape[d]);
  }
  return Result("squeeze", operand, std::move(shape), std::move(out));
}

absl::StatusOr<ArrayType> ExpandDimsRule(const ArrayType& operand,
                                         const std::vector<int64_t>& axes) {
  const int out_rank = operand.rank() + static_cast<int>(axes.size());
  std::vector<bool> is_new(out_rank, false);
  for (int64_t a : axes) {
    MS_ASSIGN_OR_RETURN(int dim, rules::CanonicalizeDim(a, out_rank, "expand_dims axis"));
    if (is_new[dim]) {
      return InvalidArgument("repeated axis in expand_dims: ", PyTupleRepr(axes));
    }
    is_new[dim] = true;
  }
  Entries in = rules::ExplicitEntries(operand), out;
  Shape shape;
  int next = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (is_new[d]) {
      out.push_back(Entry{});
      shape.push_back(1);
    } else {
      out.push_back(in[next]);
      shape.push_back(operand.shape[next++]);
    }
  }
  return Result("broadcast_in_dim", operand, std::move(shape), std::move(out));
}

absl::StatusOr<ArrayType> BroadcastToRule(const ArrayType& operand,
                                          const std::vector<int64_t>& shape,
                                          const std::optional<PartitionSpec>& out_sharding) {
  const int rank = static_cast<int>(shape.size());
  const int lead = rank - operand.rank();
  bool ok = lead >= 0;
  for (int d = 0; ok && d < operand.rank(); ++d) {
    ok = operand.shape[d] == shape[lead + d] || operand.shape[d] == 1;
  }
  for (int64_t s : shape) ok = ok && s >= 0;
  if (!ok) {
    return InvalidArgument("Incompatible shapes for broadcasting: ",
                           PyTupleRepr(operand.shape), " and requested shape ",
                           PyTupleRepr(shape));
  }
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("broadcast_in_dim", ptrs));
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(PartitionSpec out,
                        rules::ParseOutSharding("broadcast_to", mesh, *out_sharding, rank));
    if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, shape, mesh, ptrs);
    return rules::FinishResult("broadcast_in_dim", ptrs, operand.dtype, shape, mesh,
                               out.entries(), out.unreduced());
  }
  Entries in = rules::ExplicitEntries(operand);
  Entries out(lead);
  for (int d = 0; d < operand.rank(); ++d) {
    out.push_back(operand.shape[d] == shape[lead + d] ? in[d] : Entry{});
  }
  return Result("broadcast_in_dim", operand, shape, std::move(out));
}

}  // namespace meshserve
