#include "common/sharding/rules/reshape.h"

#include <utility>
#include <variant>

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

// One dim of the "split on one axis" analysis: either an unchanged size or the
// list of pieces the dim was split into.
struct Piece {
  int64_t size = 0;
  std::vector<int64_t> split;  // non-empty: the dim was split into these
};

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// _split_on_one_axis. Returns nullopt for "not a single split"; sets
// *unsupported for the "more than one split" error.
std::optional<std::vector<Piece>> SplitOnOneAxis(Shape op_shape, Shape new_sizes,
                                                 bool* unsupported) {
  if (new_sizes.size() <= op_shape.size()) return std::nullopt;
  const size_t orig_rank = op_shape.size();
  size_t num_1s = 0;
  while (!op_shape.empty() && !new_sizes.empty() && op_shape.back() == 1 &&
         new_sizes.back() == 1) {
    ++num_1s;
    op_shape.pop_back();
    new_sizes.pop_back();
  }
  std::vector<Piece> out;
  size_t i = 0, j = 0;
  int count = 0;
  while (j < new_sizes.size()) {
    if (i >= op_shape.size()) return std::nullopt;
    if (op_shape[i] == new_sizes[j]) {
      out.push_back(Piece{op_shape[i], {}});
    } else {
      if (++count > 1) {
        *unsupported = true;
        return std::nullopt;
      }
      std::vector<int64_t> temp = {new_sizes[j]};
      size_t next_j = j + 1, next_i = i + 1;
      while (Prod(temp) != op_shape[i] ||
             (next_j < new_sizes.size() && new_sizes[next_j] == 1)) {
        if (Prod(temp) > op_shape[i]) return std::nullopt;
        if (Prod(temp) == op_shape[i] && next_i < op_shape.size() &&
            next_j < new_sizes.size() && new_sizes[next_j] == op_shape[next_i]) {
          break;
        }
        ++j;
        if (j >= new_sizes.size()) return std::nullopt;
        temp.push_back(new_sizes[j]);
        ++next_j;
      }
      out.push_back(Piece{op_shape[i], temp});
    }
    ++i;
    ++j;
  }
  for (size_t k = 0; k < num_1s; ++k) out.push_back(Piece{1, {}});
  if (out.size() != orig_rank) return std::nullopt;
  return out;
}

// split_partitions: hands the axes of `axes` out to `pieces`, major first.
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
  if (next != axes.size()) return reshape_error;  // axes left over
  return out;
}

}  // namespace

// Long on purpose: mirrors jax/_src/lax/lax.py _reshape_sharding_rule one to one.
absl::StatusOr<ArrayType> ReshapeRule(const ArrayType& operand,
                                      const std::vector<int64_t>& new_sizes,
                                      const std::optional<PartitionSpec>& out_sharding,
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
  if (dimensions.has_value()) {
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
  }
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("reshape", ptrs));
  const int new_rank = static_cast<int>(new_sizes.size());
  std::optional<PartitionSpec> out;
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(out, rules::ParseOutSharding("reshape", mesh, *out_sharding, new_rank));
  }
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, new_sizes, mesh, ptrs);
  if (out.has_value()) {
    return rules::FinishResult("reshape", ptrs, operand.dtype, new_sizes, mesh, out->entries(),
                               out->unreduced());
  }
  const absl::Status error = InvalidArgument(
      "This reshape is not supported. Please specify the sharding of the output via the "
      "`out_sharding` argument of jax.lax.reshape. Got operand type: ",
      operand.ToString(true), ", new sizes: ", PyTupleRepr(new_sizes));
  const Entries in = rules::ExplicitEntries(operand);
  auto finish = [&](Entries e) {
    return rules::FinishResult("reshape", ptrs, operand.dtype, new_sizes, mesh, std::move(e));
  };
  bool replicated = true;
  for (const Entry& e : in) replicated &= e.empty();
  if (replicated) return finish(Entries(new_rank));

  Shape op_non1, new_non1;
  for (int64_t s : operand.shape) if (s != 1) op_non1.push_back(s);
  for (int64_t s : new_sizes) if (s != 1) new_non1.push_back(s);
  if (op_non1 == new_non1) {
    Entries filtered, result;
    for (int d = 0; d < operand.rank(); ++d) {
      if (operand.shape[d] != 1) filtered.push_back(in[d]);
    }
    size_t k = 0;
    for (int64_t n : new_sizes) result.push_back(n == 1 ? Entry{} : filtered[k++]);
    return finish(std::move(result));
  }

  // Newer JAX words the two-splits/two-merges case separately; keep both
  // phrases so either reading finds its words.
  auto more_than_one = [&](absl::string_view what) {
    return InvalidArgument(what, " on more than 1 axis is not supported. ", error.message());
  };
  bool unsupported = false;
  std::optional<std::vector<Piece>> split = SplitOnOneAxis(operand.shape, new_sizes, &unsupported);
  if (unsupported) return more_than_one("Splitting");
  if (split.has_value()) {
    Entries result;
    for (size_t d = 0; d < split->size(); ++d) {
      const Piece& p = (*split)[d];
      if (p.split.empty()) {
        result.push_back(in[d]);
      } else if (in[d].empty()) {
        result.insert(result.end(), p.split.size(), Entry{});
      } else if (!dimensions.has_value()) {
        MS_ASSIGN_OR_RETURN(Entries parts, SplitPartitions(mesh, in[d], p.split, error));
        result.insert(result.end(), parts.begin(), parts.end());
      } else {
        return error;
      }
    }
    if (static_cast<int>(result.size()) != new_rank) return error;
    return finish(std::move(result));
  }

  // Merge: the operand's shape is a split of new_sizes.
  std::optional<std::vector<Piece>> merge;
  if (new_sizes.size() < operand.shape.size()) {
    merge = SplitOnOneAxis(new_sizes, operand.shape, &unsupported);
    if (unsupported) return more_than_one("Merging");
  }
  if (!merge.has_value()) return error;
  Entries result;
  size_t next = 0;
  for (size_t d = 0; d < merge->size(); ++d) {
    const Piece& p = (*merge)[d];
    if (p.split.empty()) {
      if (next >= in.size()) return error;
      result.push_back(in[next++]);
      continue;
    }
    Entries group;
    for (size_t k = 0; k < p.split.size(); ++k) {
      if (next >= in.size()) return error;
      group.push_back(in[next++]);
    }
    bool all_none = true;
    for (const Entry& e : group) all_none &= e.empty();
    if (all_none) {
      result.push_back(Entry{});
      continue;
    }
    if (dimensions.has_value()) return error;
    while (!group.empty() && group.back().empty()) group.pop_back();
    Entry flat;
    for (const Entry& e : group) {
      if (e.empty()) return error;  // an unsharded dim before a sharded one
      flat.insert(flat.end(), e.begin(), e.end());
    }
    MS_ASSIGN_OR_RETURN(Entries parts, SplitPartitions(mesh, flat, {new_sizes[d]}, error));
    result.push_back(parts[0]);
  }
  if (next != in.size() || static_cast<int>(result.size()) != new_rank) return error;
  return finish(std::move(result));
}

}  // namespace meshserve
