// Gather: lax.gather and the jnp paths built on it, jnp.take(a, indices, axis)
// and a[indices] / a.at[indices].get(out_sharding=)
// (jax/_src/lax/slicing.py: _gather_shape_rule, _gather_spec_computation,
// _gather_sharding_rule; jax/_src/numpy/indexing.py: _take, rewriting_take).
//
// lax.gather's rule (_gather_spec_computation), on the operand's and the
// indices' entries:
//   * both fully replicated -> P();
//   * allowed only when (1) every operand dim in start_index_map is a full
//     slice (slice size == dim size) or unsharded, (2) each operand batching
//     dim and its indices batching dim agree or one of them is None, and (3)
//     every indices dim that is not a batching dim is unsharded (a sharded
//     index array needs collectives);
//   * then the offset dims of the result take the operand's entries (the
//     operand dims neither collapsed nor batching, in order) and the other dims
//     take the indices' entries in order, a batching dim taking the operand's
//     entry where the indices' is None;
//   * otherwise "Use `.at[...].get(out_sharding=)` to provide output
//     PartitionSpec for the gather indexing as out sharding could not be
//     resolved unambiguously (or would require collectives on inputs). Got
//     operand=ShapedArray(...), indices=ShapedArray(...)".
// The index vector dim is always the last dim of `indices` (as in JAX).
//
// jnp.take(a, indices, axis) is gather(a, indices[..., None]) with
// collapsed_slice_dims = start_index_map = (axis,), slice size 1 on `axis` and
// full elsewhere; `axis` None ravels `a` first (a reshape). So the table's
// other dims keep their entries, a sharded `axis` or sharded indices is the
// error above (mesh x=2, y=2; tests/pjit_test.py test_gather_sharding_rule):
//   take(f32[64@x,16], i32[8,4], axis=1)  -> f32[64@x,8,4]
//   take(f32[64,16@x], i32[8@x,4], axis=0) -> error (sharded indices)
// With `out_sharding` it is a.at[indices].get(out_sharding=): the gather runs
// under auto_axes over the Explicit axes and the result is out_sharding
// (test_auto_gather_out_sharding). jnp.take itself takes no out_sharding.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_GATHER_H_
#define MESHSERVE_COMMON_SHARDING_RULES_GATHER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// lax.GatherDimensionNumbers.
struct GatherDimensionNumbers {
  std::vector<int64_t> offset_dims;           // result dims that come from the operand
  std::vector<int64_t> collapsed_slice_dims;  // operand dims sliced to 1 and dropped
  std::vector<int64_t> start_index_map;       // operand dim of each index vector entry
  std::vector<int64_t> operand_batching_dims;
  std::vector<int64_t> start_indices_batching_dims;  // their indices dims, in order
};

// lax.gather(operand, indices, dimension_numbers, slice_sizes).
// \error kInvalidArgument: _gather_shape_rule's checks (JAX's TypeError
//   texts), non-integer indices, conflicting meshes ("Conflicting meshes
//   received"), the rule's error above, duplicate axes in the result.
absl::StatusOr<ArrayType> GatherRule(const ArrayType& operand, const ArrayType& indices,
                                     const GatherDimensionNumbers& dimension_numbers,
                                     const std::vector<int64_t>& slice_sizes);

// jnp.take(a, indices, axis) (`axis` nullopt: on the flattened array); with
// `out_sharding`, a.at[indices].get(out_sharding=) along `axis`.
// \error kInvalidArgument: axis out of range, "Cannot do a non-empty
//   jnp.take() from an empty axis.", the reshape error of a ravel, and
//   GatherRule's errors.
absl::StatusOr<ArrayType> TakeRule(const ArrayType& a, const ArrayType& indices,
                                   std::optional<int64_t> axis,
                                   const std::optional<PartitionSpec>& out_sharding =
                                       std::nullopt);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_GATHER_H_
