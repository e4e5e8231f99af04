#include "common/sharding/rules/reduce.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {

using rules::Entries;
using rules::Entry;
using rules::Shape;

absl::StatusOr<ArrayType> ReduceRule(absl::string_view op_name, const ArrayType& operand,
                                     const std::optional<std::vector<int64_t>>& axes,
                                     const std::optional<PartitionSpec>& out_sharding) {
  std::vector<bool> reduced(operand.rank(), !axes.has_value());
  if (axes.has_value()) {
    for (int64_t a : *axes) {
      MS_ASSIGN_OR_RETURN(int d, rules::CanonicalizeDim(a, operand.rank(),
                                                        absl::StrCat(op_name, " axis")));
      if (reduced[d]) {
        return InvalidArgument(op_name, ": duplicate value in 'axes': ",
                               PyTupleRepr(*axes));
      }
      reduced[d] = true;
    }
  }
  const Entries in = rules::ExplicitEntries(operand);
  Entries out;
  Shape shape;
  Entries reduced_spec;
  for (int d = 0; d < operand.rank(); ++d) {
    if (reduced[d]) {
      reduced_spec.push_back(in[d]);
    } else {
      out.push_back(in[d]);
      shape.push_back(operand.shape[d]);
    }
  }
  const ArrayType* ptrs[] = {&operand};
  // argmax/argmin return int32 indices.
  const DType dtype =
      (op_name == "argmax" || op_name == "argmin") ? DType::kInt32 : operand.dtype;
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(op_name, ptrs));
  std::optional<PartitionSpec> parsed;
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(parsed, rules::ParseOutSharding(op_name, mesh, *out_sharding,
                                                        static_cast<int>(shape.size())));
  }
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(dtype, std::move(shape), mesh, ptrs);
  }
  if (parsed.has_value()) {
    absl::flat_hash_set<std::string> allowed;
    for (const Entry& e : reduced_spec) allowed.insert(e.begin(), e.end());
    for (const std::string& u : parsed->unreduced()) {
      if (!allowed.contains(u)) {
        return InvalidArgument(
            "out_sharding's unreduced axes should be in operand's specs that were ",
            op_name, " over. Got unreduced axes={", absl::StrJoin(parsed->unreduced(), ", "),
            "} and operand spec of reduced dims=", EntriesTupleRepr(reduced_spec));
      }
    }
    return rules::FinishResult(op_name, ptrs, dtype, std::move(shape), mesh,
                               parsed->entries(), parsed->unreduced());
  }
  return rules::FinishResult(op_name, ptrs, dtype, std::move(shape), mesh,
                             std::move(out));
}

absl::StatusOr<ArrayType> CumulativeRule(absl::string_view op_name, const ArrayType& operand,
                                         std::optional<int64_t> axis) {
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(op_name, ptrs));
  const Entries in = rules::ExplicitEntries(operand);
  if (!axis.has_value()) {
    Shape flat = {operand.NumElements()};
    if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, flat, mesh, ptrs);
    for (const Entry& e : in) {
      if (!e.empty()) {
        return InvalidArgument(op_name, " with axis=None flattens its input: The input "
                               "should be fully replicated. Got input type=",
                               operand.ToString(true));
      }
    }
    return rules::FinishResult(op_name, ptrs, operand.dtype, flat, mesh, Entries(1));
  }
  MS_ASSIGN_OR_RETURN(int d, rules::CanonicalizeDim(*axis, operand.rank(),
                                                    absl::StrCat(op_name, " axis")));
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(operand.dtype, operand.shape, mesh, ptrs);
  }
  if (!in[d].empty()) {
    return InvalidArgument("Input should be unsharded over the axis being reduced. Got input "
                           "type=", operand.ToString(true), " and axis=", d);
  }
  return rules::FinishResult(op_name, ptrs, operand.dtype, operand.shape, mesh, in);
}

}  // namespace meshserve
