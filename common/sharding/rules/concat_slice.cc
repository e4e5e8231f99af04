#include "common/sharding/rules/concat_slice.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// _get_sharding_for_varying_out_shape, then the result type. A result whose
// every dim has size 1 (or a scalar) is P().
absl::StatusOr<ArrayType> VaryingOutShape(absl::string_view name, absl::string_view prim,
                                          const ArrayType& operand, Shape out_shape) {
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh(prim, ptrs));
  bool all_ones = std::all_of(out_shape.begin(), out_shape.end(),
                              [](int64_t s) { return s == 1; });
  if (!rules::RulesActive(mesh) || all_ones) {
    return rules::UnshardedResult(operand.dtype, std::move(out_shape), mesh, ptrs);
  }
  MS_ASSIGN_OR_RETURN(Entries in, rules::VaryingOutShapeEntries(name, mesh, operand, out_shape));
  return rules::FinishResult(prim, ptrs, operand.dtype, std::move(out_shape), mesh, in);
}

}  // namespace

absl::StatusOr<ArrayType> ConcatenateRule(absl::Span<const ArrayType> operands,
                                          int64_t dimension) {
  if (operands.empty()) return InvalidArgument("concatenate expects at least one operand");
  const ArrayType& first = operands[0];
  if (first.rank() == 0) return InvalidArgument("Cannot concatenate scalars (rank 0)");
  MS_ASSIGN_OR_RETURN(int dim, rules::CanonicalizeDim(dimension, first.rank(),
                                                      "concatenate dimension"));
  Shape shape = first.shape;
  shape[dim] = 0;
  for (const ArrayType& t : operands) {
    bool ok = t.rank() == first.rank();
    for (int d = 0; ok && d < t.rank(); ++d) ok = d == dim || t.shape[d] == first.shape[d];
    if (!ok) {
      std::vector<std::string> shapes;
      for (const ArrayType& k : operands) shapes.push_back(PyTupleRepr(k.shape));
      return InvalidArgument("concatenate requires all operands to have the same shape except "
                             "along dimension ", dim, ", got ", absl::StrJoin(shapes, ", "), ".");
    }
    shape[dim] += t.shape[dim];
  }
  std::vector<const ArrayType*> ptrs = rules::Pointers(operands);
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("concatenate", ptrs));
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(first.dtype, shape, mesh, ptrs);
  const Entries e0 = rules::ExplicitEntries(first);
  for (const ArrayType& t : operands) {
    if (rules::ExplicitEntries(t) != e0) {
      std::vector<std::string> specs;
      for (const ArrayType& k : operands) {
        specs.push_back(absl::StrCat("NamedSharding(mesh=", mesh.ToString(),
                                     ", spec=", EntriesTupleRepr(rules::ExplicitEntries(k)),
                                     ")"));
      }
      return InvalidArgument("All operands should have the same sharding. Got shardings ",
                             absl::StrJoin(specs, ", "));
    }
  }
  return rules::FinishResult("concatenate", ptrs, first.dtype, std::move(shape), mesh, e0);
}

absl::StatusOr<ArrayType> StackRule(absl::Span<const ArrayType> operands, int64_t axis) {
  if (operands.empty()) return InvalidArgument("Need at least one array to stack.");
  const int rank = operands[0].rank();
  MS_ASSIGN_OR_RETURN(int a, rules::CanonicalizeDim(axis, rank + 1, "stack axis"));
  std::vector<ArrayType> expanded;
  for (const ArrayType& t : operands) {
    if (t.shape != operands[0].shape) {
      return InvalidArgument("All input arrays must have the same shape. Got ",
                             PyTupleRepr(operands[0].shape), " and ",
                             PyTupleRepr(t.shape));
    }
    Shape shape = t.shape;
    Entries e = rules::ExplicitEntries(t);
    shape.insert(shape.begin() + a, 1);
    e.insert(e.begin() + a, Entry{});
    MS_ASSIGN_OR_RETURN(ArrayType x, MakeArrayType(t.dtype, std::move(shape), t.sharding.mesh(),
                                                   PartitionSpec(std::move(e))));
    x.varying = t.varying;
    expanded.push_back(std::move(x));
  }
  return ConcatenateRule(expanded, a);
}

absl::StatusOr<std::vector<ArrayType>> SplitRule(const ArrayType& operand,
                                                 const std::vector<int64_t>& sizes,
                                                 int64_t axis) {
  MS_ASSIGN_OR_RETURN(int a, rules::CanonicalizeDim(axis, operand.rank(), "split axis"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || !CheckedAdd(total, s, &total)) {
      return InvalidArgument("split sizes must be non-negative and not overflow, got ",
                             PyTupleRepr(sizes));
    }
  }
  if (total != operand.shape[a]) {
    return InvalidArgument("Sum of sizes ", total, " must be equal to dimension ",
                           operand.shape[a], " of the operand shape ",
                           PyTupleRepr(operand.shape), " at axis ", a);
  }
  std::vector<ArrayType> out;
  for (int64_t s : sizes) {
    Shape shape = operand.shape;
    shape[a] = s;
    MS_ASSIGN_OR_RETURN(ArrayType t, VaryingOutShape("split", "split", operand, std::move(shape)));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<ArrayType> SliceRule(const ArrayType& operand, const std::vector<int64_t>& start,
                                    const std::vector<int64_t>& limit,
                                    const std::optional<std::vector<int64_t>>& strides) {
  const size_t rank = operand.shape.size();
  if (start.size() != rank || limit.size() != rank ||
      (strides.has_value() && strides->size() != rank)) {
    return InvalidArgument("slice start_indices, limit_indices and strides must have length "
                           "equal to the number of dimensions of the operand, got ",
                           PyTupleRepr(start), ", ", PyTupleRepr(limit),
                           " for operand shape ", PyTupleRepr(operand.shape), ".");
  }
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t stride = strides.has_value() ? (*strides)[d] : 1;
    if (start[d] < 0 || limit[d] > operand.shape[d] || start[d] > limit[d] || stride < 1) {
      return InvalidArgument("slice indices out of range for dim ", d, ": start ", start[d],
                             ", limit ", limit[d], ", stride ", stride, " for operand shape ",
                             PyTupleRepr(operand.shape), ".");
    }
    out[d] = limit[d] == start[d] ? 0 : (limit[d] - start[d] - 1) / stride + 1;
  }
  return VaryingOutShape("slicing", "slice", operand, std::move(out));
}

absl::StatusOr<ArrayType> DynamicSliceRule(const ArrayType& operand,
                                           absl::Span<const ArrayType> start_indices,
                                           const std::vector<int64_t>& slice_sizes) {
  if (start_indices.size() != operand.shape.size()) {
    return InvalidArgument("Length of slice indices must match number of operand dimensions (",
                           start_indices.size(), " vs ", PyTupleRepr(operand.shape), ")");
  }
  for (const ArrayType& i : start_indices) {
    if (i.rank() != 0) {
      return InvalidArgument("start_indices arguments to dynamic_slice must be scalars, got "
                             "indices ", i.ToString(true));
    }
    if (!rules::IsIntegerDType(i.dtype) || i.dtype != start_indices[0].dtype) {
      return InvalidArgument("index arguments to dynamic_slice must be integers of the same "
                             "type, got: ", DTypeName(i.dtype));
    }
  }
  bool fits = slice_sizes.size() == operand.shape.size();
  for (size_t d = 0; fits && d < slice_sizes.size(); ++d) {
    fits = slice_sizes[d] <= operand.shape[d];
  }
  if (!fits) {
    return InvalidArgument("slice slice_sizes must be less than or equal to operand shape, got "
                           "slice_sizes ", PyTupleRepr(slice_sizes), " for operand shape ",
                           PyTupleRepr(operand.shape), ".");
  }
  for (int64_t s : slice_sizes) {
    if (s < 0) {
      return InvalidArgument("slice slice_sizes must be greater than or equal to zero, got "
                             "slice_sizes of ", PyTupleRepr(slice_sizes), ".");
    }
  }
  return VaryingOutShape("dynamic_slice", "dynamic_slice", operand, slice_sizes);
}

absl::StatusOr<ArrayType> PadRule(const ArrayType& operand,
                                  const std::vector<std::array<int64_t, 3>>& padding_config) {
  if (padding_config.size() != operand.shape.size()) {
    return InvalidArgument("length of padding_config must equal the number of axes of "
                           "operand, got padding_config of length ", padding_config.size(),
                           " for operand shape ", PyTupleRepr(operand.shape));
  }
  Shape out(operand.shape.size());
  for (size_t d = 0; d < out.size(); ++d) {
    auto [lo, hi, interior] = padding_config[d];
    if (interior < 0) {
      return InvalidArgument("interior padding in padding_config must be nonnegative, got ",
                             interior, " at dim ", d);
    }
    int64_t n = operand.shape[d], grown = 0, sum = 0;
    if (!CheckedMul(std::max<int64_t>(0, n - 1), interior, &grown) ||
        !CheckedAdd(grown, n, &sum) || !CheckedAdd(sum, lo, &sum) || !CheckedAdd(sum, hi, &sum)) {
      return InvalidArgument("padding_config ", lo, ", ", hi, ", ", interior, " at dim ", d,
                             " overflows the dimension size");
    }
    out[d] = sum;
    if (out[d] < 0) {
      return InvalidArgument("Dimension size after padding is not at least 0, got result "
                             "size ", out[d], " at dim ", d);
    }
  }
  return VaryingOutShape("padding", "pad", operand, std::move(out));
}

absl::StatusOr<ArrayType> TileRule(const ArrayType& operand, const std::vector<int64_t>& reps) {
  const int rank = std::max(operand.rank(), static_cast<int>(reps.size()));
  Shape a_shape(rank - operand.rank(), 1);
  a_shape.insert(a_shape.end(), operand.shape.begin(), operand.shape.end());
  Entries in(rank - operand.rank());
  Entries e = rules::ExplicitEntries(operand);
  in.insert(in.end(), e.begin(), e.end());
  std::vector<int64_t> r(rank - reps.size(), 1);
  r.insert(r.end(), reps.begin(), reps.end());
  Shape shape(rank);
  for (int d = 0; d < rank; ++d) {
    if (r[d] < 0 || !CheckedMul(a_shape[d], r[d], &shape[d])) {
      return InvalidArgument("tile reps must be non-negative and not overflow, got ",
                             PyTupleRepr(reps));
    }
  }
  const ArrayType* ptrs[] = {&operand};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("tile", ptrs));
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, shape, mesh, ptrs);
  for (int d = 0; d < rank; ++d) {
    if (r[d] != 1 && !in[d].empty()) {
      return InvalidArgument("jnp.tile: dimension ", d, " of the input (sharded over ",
                             EntryRepr(in[d]), ") cannot be sharded when its tiling "
                             "is non-trivial (reps=", r[d], "): tiling is non-trivial for a "
                             "sharded dimension. Got input type=", operand.ToString(true),
                             " and reps=", PyTupleRepr(reps));
    }
  }
  return rules::FinishResult("tile", ptrs, operand.dtype, std::move(shape), mesh, std::move(in));
}

}  // namespace meshserve
