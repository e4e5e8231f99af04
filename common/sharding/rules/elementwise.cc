#include "common/sharding/rules/elementwise.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

// An operand lifted to `rank` (leading size-1, unsharded dims).
struct Lifted {
  Shape shape;
  Entries entries;
};

Lifted Lift(const ArrayType& t, int rank) {
  Lifted l;
  int pad = rank - t.rank();
  l.shape.assign(pad, 1);
  l.entries.assign(pad, Entry{});
  Entries e = rules::ExplicitEntries(t);
  l.shape.insert(l.shape.end(), t.shape.begin(), t.shape.end());
  l.entries.insert(l.entries.end(), e.begin(), e.end());
  return l;
}

absl::StatusOr<Shape> BroadcastShapes(absl::string_view op_name,
                                      const std::vector<Lifted>& ops) {
  Shape out = ops[0].shape;
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t size = 1;
    for (const Lifted& l : ops) {
      if (l.shape[d] == 1) continue;
      if (size != 1 && size != l.shape[d]) {
        std::vector<std::string> shapes;
        for (const Lifted& k : ops) shapes.push_back(PyTupleRepr(k.shape));
        return InvalidArgument(op_name, " got incompatible shapes for broadcasting: ",
                               absl::StrJoin(shapes, ", "), ".");
      }
      size = l.shape[d];
    }
    out[d] = size;
  }
  return out;
}

// broadcasting_sharding_rule over lifted operands of equal rank.
absl::StatusOr<Entries> BroadcastEntries(absl::string_view op_name,
                                         const std::vector<Lifted>& ops) {
  const size_t rank = ops[0].shape.size();
  Entries result(rank);
  for (size_t d = 0; d < rank; ++d) {
    bool all_equal = true;
    for (const Lifted& l : ops) all_equal &= l.entries[d] == ops[0].entries[d];
    if (all_equal) {
      result[d] = ops[0].entries[d];
      continue;
    }
    std::vector<const Entry*> non_trivial;
    for (const Lifted& l : ops) {
      if (!(l.shape[d] == 1 && l.entries[d].empty())) non_trivial.push_back(&l.entries[d]);
    }
    if (non_trivial.empty()) continue;
    bool rest_agree = true;
    for (const Entry* e : non_trivial) rest_agree &= *e == *non_trivial[0];
    if (rest_agree) {
      result[d] = *non_trivial[0];
      continue;
    }
    for (const Lifted& l : ops) {
      const Entry& s = l.entries[d];
      if (result[d].empty() && !s.empty()) {
        result[d] = s;
      } else if (!result[d].empty() && !s.empty() && result[d] != s) {
        std::vector<std::string> specs;
        for (const Lifted& k : ops) specs.push_back(EntriesTupleRepr(k.entries));
        return InvalidArgument(op_name, " got incompatible shardings for broadcasting: ",
                               absl::StrJoin(specs, ", "), ".");
      }
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<ArrayType> ElementwiseRule(absl::string_view op_name,
                                          absl::Span<const ArrayType> operands) {
  if (operands.empty()) return InvalidArgument(op_name, " needs at least one operand");
  std::vector<const ArrayType*> ptrs = rules::Pointers(operands);
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(op_name, ptrs));
  int rank = 0;
  DType dtype = operands[0].dtype;
  bool have_dtype = false;
  for (const ArrayType& t : operands) {
    rank = std::max(rank, t.rank());
    if (!have_dtype && t.rank() > 0) {
      dtype = t.dtype;
      have_dtype = true;
    }
  }
  std::vector<Lifted> lifted;
  for (const ArrayType& t : operands) {
    if (t.rank() > 0) lifted.push_back(Lift(t, rank));
  }
  if (lifted.empty()) return rules::UnshardedResult(dtype, {}, mesh, ptrs);
  MS_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(op_name, lifted));
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(dtype, shape, mesh, ptrs);
  MS_ASSIGN_OR_RETURN(Entries entries, BroadcastEntries(op_name, lifted));
  // Unreduced operands (e.g. x + x on a partial sum): all non-scalar operands
  // must agree, and the result stays unreduced over the same axes.
  std::vector<std::string> unreduced;
  bool first = true;
  for (const ArrayType& t : operands) {
    if (t.rank() == 0) continue;
    std::vector<std::string> u = t.spec().unreduced();
    std::sort(u.begin(), u.end());
    if (!first && u != unreduced) {
      return InvalidArgument(op_name, " got operands with different unreduced axes: ",
                             operands[0].ToString(true), " and ",
                             t.ToString(true));
    }
    unreduced = std::move(u);
    first = false;
  }
  return rules::FinishResult(op_name, ptrs, dtype, std::move(shape), mesh, std::move(entries),
                             std::move(unreduced));
}

absl::StatusOr<ArrayType> SelectRule(const ArrayType& pred, const ArrayType& on_true,
                                     const ArrayType& on_false) {
  std::vector<const ArrayType*> ptrs = {&pred, &on_true, &on_false};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("select", ptrs));
  int rank = std::max({pred.rank(), on_true.rank(), on_false.rank()});
  std::vector<Lifted> lifted = {Lift(pred, rank), Lift(on_true, rank), Lift(on_false, rank)};
  std::vector<Lifted> non_scalar;
  for (const ArrayType* t : ptrs) {
    if (t->rank() > 0) non_scalar.push_back(Lift(*t, rank));
  }
  Shape shape;
  if (!non_scalar.empty()) {
    MS_ASSIGN_OR_RETURN(shape, BroadcastShapes("select", non_scalar));
  }
  const DType dtype = on_true.dtype;
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(dtype, shape, mesh, ptrs);
  // jnp.where broadcasts every operand to `shape` (broadcast_to keeps the
  // entries of existing dims; scalars become fully unsharded arrays).
  // Scalar cases (jnp.where(x > 0, x, 0)) take the other case's sharding.
  const Entries& t = on_true.rank() == 0 ? lifted[2].entries : lifted[1].entries;
  const Entries& f = on_false.rank() == 0 ? lifted[1].entries : lifted[2].entries;
  if (t != f) {
    return InvalidArgument("select cases must have the same shardings, got [",
                           EntriesTupleRepr(t), ", ", EntriesTupleRepr(f),
                           "] for on_true=", on_true.ToString(true),
                           " and on_false=", on_false.ToString(true), ".");
  }
  if (pred.rank() > 0 && lifted[0].entries != t) {
    return InvalidArgument(
        "select `which` must be scalar or have the same sharding as cases, got `which` "
        "sharding ", EntriesTupleRepr(lifted[0].entries), " but case sharding ",
        EntriesTupleRepr(t), ".");
  }
  return rules::FinishResult("select", ptrs, dtype, std::move(shape), mesh, t);
}

absl::StatusOr<ArrayType> UnaryRule(absl::string_view op_name, const ArrayType& operand) {
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(op_name, ptrs));
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(operand.dtype, operand.shape, mesh, ptrs);
  }
  return rules::FinishResult(op_name, ptrs, operand.dtype, operand.shape, mesh,
                             rules::ExplicitEntries(operand), operand.spec().unreduced());
}

}  // namespace meshserve
