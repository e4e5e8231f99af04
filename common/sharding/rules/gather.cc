#include "common/sharding/rules/gather.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/layout_ops.h"
#include "common/sharding/rules/reshape.h"
#include "common/sharding/rules/reshard.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// For each result dim: from the operand (true, the operand dim) or from the
// indices (false, the indices dim), as _gather_shape_computation walks them.
std::vector<std::pair<bool, int64_t>> ResultDimSources(const GatherDimensionNumbers& d,
                                                       int64_t out_rank) {
  std::vector<std::pair<bool, int64_t>> out;
  int64_t next_slice = 0, next_index = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (!Contains(d.offset_dims, i)) {
      out.emplace_back(false, next_index++);
      continue;
    }
    while (Contains(d.collapsed_slice_dims, next_slice) ||
           Contains(d.operand_batching_dims, next_slice)) {
      ++next_slice;
    }
    out.emplace_back(true, next_slice++);
  }
  return out;
}

// _is_sorted / _no_duplicate_dims / _dims_in_range, JAX's TypeError texts.
absl::Status CheckDims(const std::vector<int64_t>& dims, int64_t rank, absl::string_view name,
                       bool sorted) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (sorted && i > 0 && dims[i] < dims[i - 1]) {
      return InvalidArgument(name, " in gather op must be sorted; got ", PyTupleRepr(dims));
    }
    if (dims[i] < 0 || dims[i] >= rank) {
      return InvalidArgument("Invalid ", name, " set in gather op; valid range is [0, ", rank,
                             "); got: ", dims[i], ".");
    }
    if (std::count(dims.begin(), dims.end(), dims[i]) > 1) {
      return InvalidArgument(name, " in gather op must not repeat; got: ", PyTupleRepr(dims),
                             ".");
    }
  }
  return absl::OkStatus();
}

// _gather_shape_rule (the checks the sharding rule relies on) and
// _gather_shape_computation.
absl::StatusOr<Shape> GatherShape(const ArrayType& operand, const ArrayType& indices,
                                  const GatherDimensionNumbers& d, const Shape& slice_sizes) {
  if (!rules::IsIntegerDType(indices.dtype)) {
    return InvalidArgument("indices must have an integer type, got ", indices.ToString(true));
  }
  if (indices.rank() < 1) {
    return InvalidArgument("Gather indices must have rank >= 1 (the last dim is the index "
                           "vector), got ", indices.ToString(true));
  }
  const int64_t out_rank = static_cast<int64_t>(d.offset_dims.size()) + indices.rank() - 1;
  MS_RETURN_IF_ERROR(CheckDims(d.offset_dims, out_rank, "offset_dims", true));
  const int64_t index_vector = indices.shape.back();
  if (static_cast<int64_t>(d.start_index_map.size()) != index_vector) {
    return InvalidArgument("Gather op has ", d.start_index_map.size(),
                           " elements in start_index_map and the bound of dimension "
                           "index_vector_dim=", indices.rank() - 1, " of indices is ",
                           index_vector, ". These two numbers must be equal.");
  }
  MS_RETURN_IF_ERROR(CheckDims(d.start_index_map, operand.rank(), "start_index_map", false));
  MS_RETURN_IF_ERROR(
      CheckDims(d.collapsed_slice_dims, operand.rank(), "collapsed_slice_dims", true));
  MS_RETURN_IF_ERROR(
      CheckDims(d.operand_batching_dims, operand.rank(), "operand_batching_dims", true));
  MS_RETURN_IF_ERROR(CheckDims(d.start_indices_batching_dims, indices.rank() - 1,
                               "start_indices_batching_dims", false));
  for (int64_t c : d.collapsed_slice_dims) {
    if (Contains(d.operand_batching_dims, c) || !Contains(d.start_index_map, c)) {
      return InvalidArgument("collapsed_slice_dims in gather op must be in start_index_map and "
                             "disjoint from operand_batching_dims; got ",
                             PyTupleRepr(d.collapsed_slice_dims));
    }
  }
  if (d.operand_batching_dims.size() != d.start_indices_batching_dims.size()) {
    return InvalidArgument("Gather op requires equal numbers of operand_batching_dims and "
                           "start_indices_batching_dims, got ",
                           PyTupleRepr(d.operand_batching_dims), " and ",
                           PyTupleRepr(d.start_indices_batching_dims), ".");
  }
  for (size_t i = 0; i < d.operand_batching_dims.size(); ++i) {
    if (Contains(d.start_index_map, d.operand_batching_dims[i]) ||
        operand.shape[d.operand_batching_dims[i]] !=
            indices.shape[d.start_indices_batching_dims[i]]) {
      return InvalidArgument("Gather op requires operand batching dimensions and indices "
                             "batching dimensions to have the same shape, outside "
                             "start_index_map; got ", PyTupleRepr(d.operand_batching_dims),
                             " and ", PyTupleRepr(d.start_indices_batching_dims), ".");
    }
  }
  if (static_cast<int64_t>(slice_sizes.size()) != operand.rank() ||
      slice_sizes.size() != d.offset_dims.size() + d.collapsed_slice_dims.size() +
                                d.operand_batching_dims.size()) {
    return InvalidArgument("Gather op must have one slice size for every input dimension, "
                           "each an offset dimension or explicitly collapsed/batching; got "
                           "slice_sizes=", PyTupleRepr(slice_sizes), ", offset_dims=",
                           PyTupleRepr(d.offset_dims), " for operand ", operand.ToString(true));
  }
  for (int d_i = 0; d_i < operand.rank(); ++d_i) {
    int64_t s = slice_sizes[d_i];
    bool collapsed = Contains(d.collapsed_slice_dims, d_i) || Contains(d.operand_batching_dims, d_i);
    if (s < 0 || s > operand.shape[d_i] || (collapsed && s > 1)) {
      return InvalidArgument("Slice size at index ", d_i, " in gather op is out of range, must "
                             "be within [0, ", operand.shape[d_i], " + 1) (and at most 1 for "
                             "a collapsed or batching dim), got ", s, ".");
    }
  }
  Shape out;
  for (const auto& [from_operand, k] : ResultDimSources(d, out_rank)) {
    out.push_back(from_operand ? slice_sizes[k] : indices.shape[k]);
  }
  return out;
}

// _gather_spec_computation; nullopt where JAX returns None.
std::optional<Entries> GatherEntries(const ArrayType& operand, const ArrayType& indices,
                                     const GatherDimensionNumbers& d, const Shape& slice_sizes,
                                     int64_t out_rank) {
  const Entries op = rules::ExplicitEntries(operand);
  Entries idx = rules::ExplicitEntries(indices);
  auto replicated = [](const Entries& e) {
    return std::all_of(e.begin(), e.end(), [](const Entry& x) { return x.empty(); });
  };
  if (replicated(op) && replicated(idx)) return Entries(out_rank);
  for (int64_t i : d.start_index_map) {
    if (slice_sizes[i] != operand.shape[i] && !op[i].empty()) return std::nullopt;
  }
  for (size_t k = 0; k < d.operand_batching_dims.size(); ++k) {
    const Entry& o = op[d.operand_batching_dims[k]];
    Entry& i = idx[d.start_indices_batching_dims[k]];
    if (!o.empty() && !i.empty() && o != i) return std::nullopt;
    if (i.empty()) i = o;  // the batching dim resolves into the indices' spec
  }
  for (int64_t k = 0; k < indices.rank(); ++k) {
    if (!Contains(d.start_indices_batching_dims, k) && !idx[k].empty()) return std::nullopt;
  }
  Entries out;
  for (const auto& [from_operand, k] : ResultDimSources(d, out_rank)) {
    out.push_back(from_operand ? op[k] : idx[k]);
  }
  return out;
}

std::string ShapedArrayRepr(const ArrayType& t) {
  return absl::StrCat("ShapedArray(", t.ToString(), ")");
}

}  // namespace

absl::StatusOr<ArrayType> GatherRule(const ArrayType& operand, const ArrayType& indices,
                                     const GatherDimensionNumbers& dimension_numbers,
                                     const std::vector<int64_t>& slice_sizes) {
  MS_ASSIGN_OR_RETURN(Shape shape, GatherShape(operand, indices, dimension_numbers, slice_sizes));
  const ArrayType* ptrs[] = {&operand, &indices};
  const Mesh& om = operand.sharding.mesh();
  const Mesh& im = indices.sharding.mesh();
  if (!om.empty() && !im.empty() && om != im) {
    return InvalidArgument("Conflicting meshes received. Got: unique_meshes={", om.ToString(),
                           ", ", im.ToString(), "}");
  }
  const Mesh mesh = om.empty() ? im : om;
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(operand.dtype, shape, mesh, ptrs);
  std::optional<Entries> entries = GatherEntries(operand, indices, dimension_numbers,
                                                 slice_sizes, static_cast<int64_t>(shape.size()));
  if (!entries.has_value()) {
    return InvalidArgument(
        "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather "
        "indexing as out sharding could not be resolved unambiguously (or would require "
        "collectives on inputs). Got operand=", ShapedArrayRepr(operand),
        ", indices=", ShapedArrayRepr(indices));
  }
  return rules::FinishResult("gather", ptrs, operand.dtype, std::move(shape), mesh,
                             *std::move(entries));
}

absl::StatusOr<ArrayType> TakeRule(const ArrayType& a_in, const ArrayType& indices,
                                   std::optional<int64_t> axis,
                                   const std::optional<PartitionSpec>& out_sharding) {
  if (out_sharding.has_value()) {
    // rewriting_take: canonicalize_sharding(out_sharding, 'take'), then the
    // gather under auto_axes over the Explicit axes.
    const ArrayType* ptrs[] = {&a_in, &indices};
    MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("take", ptrs));
    MS_RETURN_IF_ERROR(
        rules::ParseOutSharding("take", mesh, *out_sharding, out_sharding->size()).status());
    std::vector<std::string> explicit_axes;
    for (const MeshAxis& m : mesh.axes()) {
      if (m.type == AxisType::kExplicit) explicit_axes.push_back(m.name);
    }
    const ArrayType args[] = {a_in, indices};
    return AutoAxesRule(args, out_sharding, explicit_axes,
                        [&](absl::Span<const ArrayType> in) -> absl::StatusOr<ArrayType> {
                          return TakeRule(in[0], in[1], axis);
                        });
  }
  ArrayType a = a_in;
  if (!axis.has_value()) {
    MS_ASSIGN_OR_RETURN(a, ReshapeRule(a_in, {a_in.NumElements()}, std::nullopt));
  }
  MS_ASSIGN_OR_RETURN(int axis_idx,
                      rules::CanonicalizeDim(axis.value_or(0), a.rank(), "take axis"));
  if (a.shape[axis_idx] == 0) {
    if (indices.NumElements() != 0) {
      return InvalidArgument("Cannot do a non-empty jnp.take() from an empty axis.");
    }
    return a;
  }
  // indices[..., None]: the index vector dim, unsharded.
  MS_ASSIGN_OR_RETURN(ArrayType idx, ExpandDimsRule(indices, {indices.rank()}));
  const int64_t index_dims = indices.rank();
  GatherDimensionNumbers d;
  for (int64_t i = 0; i < axis_idx; ++i) d.offset_dims.push_back(i);
  for (int64_t i = axis_idx + index_dims; i < a.rank() + index_dims - 1; ++i) {
    d.offset_dims.push_back(i);
  }
  d.collapsed_slice_dims = {axis_idx};
  d.start_index_map = {axis_idx};
  Shape slice_sizes = a.shape;
  slice_sizes[axis_idx] = 1;
  return GatherRule(a, idx, d, slice_sizes);
}

}  // namespace meshserve
