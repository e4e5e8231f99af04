#include "common/sharding/rules/reshape.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

// One item of _split_on_one_axis's answer: a dim kept as is (`split` empty) or
// the list of sizes it was split into (always two or more).
struct Piece {
  int64_t size = 0;
  std::vector<int64_t> split;
};

// What _split_on_one_axis found.
enum class SplitKind { kNone, kOne, kMany };

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

Shape WithoutOnes(const Shape& shape) {
  Shape out;
  for (int64_t s : shape) {
    if (s != 1) out.push_back(s);
  }
  return out;
}

// _split_on_one_axis: both shapes lose their size-1 dims first; then every
// non-1 dim of `op_shape` either equals the next new dim or is split into the
// next new dims (at most one such split: kMany raises the reshape error). The
// answer has one item per non-1 dim of op_shape. Where JAX's Python would run
// off the end of a shape (zero-size dims), the answer is kNone.
SplitKind SplitOnOneAxis(const Shape& op_shape_in, const Shape& new_sizes_in,
                         std::vector<Piece>* out) {
  const Shape op_shape = WithoutOnes(op_shape_in);
  const Shape new_sizes = WithoutOnes(new_sizes_in);
  out->clear();
  if (new_sizes.size() <= op_shape.size()) return SplitKind::kNone;
  size_t i = 0, j = 0;
  int count = 0;
  while (j < new_sizes.size()) {
    if (i >= op_shape.size()) return SplitKind::kNone;
    if (op_shape[i] == new_sizes[j]) {
      out->push_back(Piece{op_shape[i], {}});
    } else {
      if (++count > 1) return SplitKind::kMany;
      std::vector<int64_t> temp = {new_sizes[j]};
      while (Prod(temp) != op_shape[i]) {
        if (Prod(temp) > op_shape[i] || j + 1 >= new_sizes.size()) return SplitKind::kNone;
        temp.push_back(new_sizes[++j]);
      }
      out->push_back(Piece{op_shape[i], std::move(temp)});
    }
    ++i;
    ++j;
  }
  return out->size() == op_shape.size() ? SplitKind::kOne : SplitKind::kNone;
}

// split_partitions: hands the axes of `axes` out to `pieces`, major first; a
// piece of size n takes axes while n > 1. An axis that does not divide its
// piece is the reshape error; so are axes left over (an assert in JAX).
absl::StatusOr<Entries> SplitPartitions(const Mesh& mesh, const Entry& axes,
                                        const std::vector<int64_t>& pieces,
                                        const absl::Status& reshape_error) {
  size_t next = 0;
  Entries out;
  for (int64_t o : pieces) {
    Entry dim;
    while (o > 1 && next < axes.size()) {
      int64_t axis_size = rules::EntrySize(mesh, {axes[next]});
      if (o % axis_size != 0) return reshape_error;
      o /= axis_size;
      dim.push_back(axes[next++]);
    }
    out.push_back(std::move(dim));
  }
  if (next != axes.size()) return reshape_error;
  return out;
}

// The tail shared by _split_an_axis_sharding_rule and
// _merge_an_axis_sharding_rule: the entries of the non-1 new dims in order,
// and each new size-1 dim i takes the operand's entry i when the operand's dim
// i is also size 1, else None. (The merge rule indexes op_shape[i] without a
// bound check; past the operand's rank this gives None.)
absl::StatusOr<Entries> PlaceSingletons(const Shape& op_shape, const Entries& op_entries,
                                        const Shape& new_sizes, const Entries& non1,
                                        const absl::Status& reshape_error) {
  Entries out;
  size_t next = 0;
  for (size_t i = 0; i < new_sizes.size(); ++i) {
    if (new_sizes[i] == 1) {
      bool keep = i < op_shape.size() && op_shape[i] == 1;
      out.push_back(keep ? op_entries[i] : Entry{});
    } else {
      if (next >= non1.size()) return reshape_error;
      out.push_back(non1[next++]);
    }
  }
  if (next != non1.size()) return reshape_error;
  return out;
}

// The entries of the operand's non-1 dims.
Entries Non1Entries(const Shape& shape, const Entries& entries) {
  Entries out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1) out.push_back(entries[d]);
  }
  return out;
}

// _split_an_axis_sharding_rule.
absl::StatusOr<Entries> SplitAnAxis(const Mesh& mesh, const Shape& op_shape, const Entries& in,
                                    const std::vector<Piece>& split, const Shape& new_sizes,
                                    bool has_dimensions, const absl::Status& error) {
  const Entries partitions = Non1Entries(op_shape, in);
  Entries non1;
  for (size_t d = 0; d < split.size() && d < partitions.size(); ++d) {
    const Piece& p = split[d];
    const Entry& sp = partitions[d];
    if (p.split.empty()) {
      non1.push_back(sp);
    } else if (sp.empty()) {
      non1.insert(non1.end(), p.split.size(), Entry{});
    } else if (!has_dimensions) {
      MS_ASSIGN_OR_RETURN(Entries parts, SplitPartitions(mesh, sp, p.split, error));
      non1.insert(non1.end(), parts.begin(), parts.end());
    } else {
      return error;
    }
  }
  return PlaceSingletons(op_shape, in, new_sizes, non1, error);
}

// _merge_an_axis_sharding_rule: `merge` has one item per non-1 new dim, the
// operand's non-1 dims it is made of.
absl::StatusOr<Entries> MergeAnAxis(const Mesh& mesh, const Shape& op_shape, const Entries& in,
                                    const std::vector<Piece>& merge, const Shape& new_sizes,
                                    bool has_dimensions, const absl::Status& error) {
  const Entries op_spec = Non1Entries(op_shape, in);
  const Shape new_non1 = WithoutOnes(new_sizes);
  Entries non1;
  size_t next = 0;
  for (size_t d = 0; d < merge.size() && d < new_non1.size(); ++d) {
    const Piece& p = merge[d];
    if (p.split.empty()) {
      if (next >= op_spec.size()) return error;
      non1.push_back(op_spec[next++]);
      continue;
    }
    Entries group;
    for (size_t k = 0; k < p.split.size(); ++k) {
      if (next >= op_spec.size()) return error;
      group.push_back(op_spec[next++]);
    }
    bool all_none = true;
    for (const Entry& e : group) all_none &= e.empty();
    if (all_none) {
      non1.push_back(Entry{});
      continue;
    }
    if (has_dimensions) return error;
    // strip_trailing_nones(flatten_spec(...)); a None left is an error.
    while (!group.empty() && group.back().empty()) group.pop_back();
    Entry flat;
    for (const Entry& e : group) {
      if (e.empty()) return error;
      flat.insert(flat.end(), e.begin(), e.end());
    }
    MS_ASSIGN_OR_RETURN(Entries parts, SplitPartitions(mesh, flat, {new_non1[d]}, error));
    non1.push_back(parts[0]);
  }
  if (next != op_spec.size()) return error;
  return PlaceSingletons(op_shape, in, new_sizes, non1, error);
}

// _split_merge_singleton_dim_sharding_rule: only size-1 dims differ; the non-1
// dims keep their entries in order and every new size-1 dim gets None.
Entries SingletonDims(const Shape& op_shape, const Entries& in, const Shape& new_sizes) {
  const Entries filtered = Non1Entries(op_shape, in);
  Entries result;
  size_t k = 0;
  for (int64_t n : new_sizes) result.push_back(n == 1 ? Entry{} : filtered[k++]);
  return result;
}

// _reshape_shape_rule plus the total-size check of lax.reshape.
absl::Status CheckReshapeShape(const ArrayType& operand, const std::vector<int64_t>& new_sizes,
                               const std::optional<std::vector<int64_t>>& dimensions) {
  int64_t total = 1;
  for (int64_t s : new_sizes) {
    if (s < 0) {
      return InvalidArgument("reshape new_sizes must all be non-negative, got ",
                             PyTupleRepr(new_sizes));
    }
    if (!CheckedMul(total, s, &total) || total > (int64_t{1} << 62)) {
      return InvalidArgument("reshape new_sizes ", PyTupleRepr(new_sizes), " are too large");
    }
  }
  if (total != operand.NumElements()) {
    return InvalidArgument("reshape total size must be unchanged, got new_sizes ",
                           PyTupleRepr(new_sizes), " (", total, " elements) for shape ",
                           PyTupleRepr(operand.shape), " (", operand.NumElements(),
                           " elements).");
  }
  if (!dimensions.has_value()) return absl::OkStatus();
  std::vector<bool> seen(operand.rank(), false);
  bool ok = static_cast<int>(dimensions->size()) == operand.rank();
  for (int64_t d : *dimensions) {
    ok = ok && d >= 0 && d < operand.rank() && !seen[d];
    if (ok) seen[d] = true;
  }
  if (!ok) {
    return InvalidArgument("reshape dimensions must be a permutation of the operand "
                           "dimensions, got ", PyTupleRepr(*dimensions));
  }
  return absl::OkStatus();
}

// _reshape_sharding_rule without out_sharding, on the Explicit entries `in`.
absl::StatusOr<Entries> ReshapeEntries(const Mesh& mesh, const ArrayType& operand,
                                       const Entries& in, const Shape& new_sizes,
                                       bool has_dimensions) {
  const absl::Status error = InvalidArgument(
      "This reshape is not supported. Please specify the sharding of the output via the "
      "`out_sharding` argument of jax.lax.reshape. Got operand type: ",
      operand.ToString(true), ", new sizes: ", PyTupleRepr(new_sizes));
  bool replicated = true;
  for (const Entry& e : in) replicated &= e.empty();
  if (replicated) return Entries(new_sizes.size());
  if (WithoutOnes(operand.shape) == WithoutOnes(new_sizes)) {
    return SingletonDims(operand.shape, in, new_sizes);
  }
  // Later JAX words the two-splits / two-merges case on its own; the message
  // keeps both phrases.
  auto more_than_one = [&](absl::string_view what) {
    return InvalidArgument(what, " on more than 1 axis is not supported. ", error.message());
  };
  // First _split_on_one_axis, then _merge_on_one_axis (the operand's shape is
  // a split of new_sizes).
  std::vector<Piece> pieces;
  for (bool merge : {false, true}) {
    SplitKind kind = merge ? SplitOnOneAxis(new_sizes, operand.shape, &pieces)
                           : SplitOnOneAxis(operand.shape, new_sizes, &pieces);
    if (kind == SplitKind::kMany) return more_than_one(merge ? "Merging" : "Splitting");
    if (kind == SplitKind::kOne) {
      return (merge ? MergeAnAxis : SplitAnAxis)(mesh, operand.shape, in, pieces, new_sizes,
                                                 has_dimensions, error);
    }
  }
  return error;
}

}  // namespace

absl::StatusOr<ArrayType> ReshapeRule(const ArrayType& operand,
                                      const std::vector<int64_t>& new_sizes,
                                      const std::optional<PartitionSpec>& out_sharding,
                                      const std::optional<std::vector<int64_t>>& dimensions) {
  MS_RETURN_IF_ERROR(CheckReshapeShape(operand, new_sizes, dimensions));
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("reshape", ptrs));
  const int new_rank = static_cast<int>(new_sizes.size());
  std::optional<PartitionSpec> out;
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(out, rules::ParseOutSharding("reshape", mesh, *out_sharding, new_rank));
  }
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(operand.dtype, new_sizes, mesh, ptrs);
  }
  if (out.has_value()) {
    return rules::FinishResult("reshape", ptrs, operand.dtype, new_sizes, mesh, out->entries(),
                               out->unreduced());
  }
  // lax.reshape passes dimensions=None to the rule when they are the identity
  // permutation (`same_dims`), so only a real permutation refuses a split or
  // merge of a sharded dim.
  bool permutes = false;
  if (dimensions.has_value()) {
    for (size_t i = 0; i < dimensions->size(); ++i) {
      permutes |= (*dimensions)[i] != static_cast<int64_t>(i);
    }
  }
  MS_ASSIGN_OR_RETURN(Entries entries,
                      ReshapeEntries(mesh, operand, rules::ExplicitEntries(operand), new_sizes,
                                     permutes));
  return rules::FinishResult("reshape", ptrs, operand.dtype, new_sizes, mesh, std::move(entries));
}

}  // namespace meshserve
