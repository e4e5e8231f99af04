// Ops that join, cut, grow or repeat arrays: concatenate, stack, split, slice,
// dynamic_slice, pad, tile (jax/_src/lax/lax.py: _concatenate_sharding_rule,
// _pad_sharding_rule; jax/_src/lax/slicing.py:
// _get_sharding_for_varying_out_shape, _slice_sharding_rule,
// _dynamic_slice_sharding_rule; jnp.stack, jnp.tile, lax.split).
//
// concatenate: every operand must have the IDENTICAL sharding (the concat dim
//   included); the result takes it. Else "All operands should have the same
//   sharding. Got shardings ...". [4@x,4@y] ++ [4@x,1@y] on dim 1 -> [4@x,5@y]
//   (divisibility of the result still applies).
// stack = expand_dims + concatenate: the new dim is None.
// slice / pad / split (_get_sharding_for_varying_out_shape): a dim whose size
//   changes AND is sharded must stay divisible by its axes' product, else
//   "<name> on sharded dims where out dim (3) is not divisible by mesh axes (2)
//   with spec (...) is not implemented." with name = slicing / padding / split.
//   If divisible the operand's sharding is kept unchanged. A result whose every
//   out dim has size 1 gives P().
// tile (jnp.tile): dims with reps == 1 keep their entries, new leading dims are
//   None, a sharded dim with reps > 1 is an error ("cannot be sharded ...
//   tiling is non-trivial"). [32@x,64] reps (1,2) -> [32@x,128].
#ifndef MESHSERVE_COMMON_SHARDING_RULES_CONCAT_SLICE_H_
#define MESHSERVE_COMMON_SHARDING_RULES_CONCAT_SLICE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// \error kInvalidArgument: no operands, rank/shape mismatch, dim out of
//   range, different shardings.
absl::StatusOr<ArrayType> ConcatenateRule(absl::Span<const ArrayType> operands,
                                          int64_t dimension);
// jnp.stack: `axis` indexes the result.
absl::StatusOr<ArrayType> StackRule(absl::Span<const ArrayType> operands, int64_t axis);
// lax.split: one result per size.
absl::StatusOr<std::vector<ArrayType>> SplitRule(const ArrayType& operand,
                                                 const std::vector<int64_t>& sizes,
                                                 int64_t axis);
// lax.slice (static). `strides` nullopt: all 1.
absl::StatusOr<ArrayType> SliceRule(const ArrayType& operand, const std::vector<int64_t>& start,
                                    const std::vector<int64_t>& limit,
                                    const std::optional<std::vector<int64_t>>& strides =
                                        std::nullopt);
// lax.pad: one (low, high, interior) per dim.
absl::StatusOr<ArrayType> PadRule(const ArrayType& operand,
                                  const std::vector<std::array<int64_t, 3>>& padding_config);
// lax.dynamic_slice(operand, start_indices, slice_sizes)
// (slicing.py: _dynamic_slice_shape_rule, _dynamic_slice_sharding_rule): the
// varying-out-shape rule above under the name "dynamic_slice"; a sharded dim
// whose slice size its axes divide keeps its entry (16@x sliced to 2 ->
// 2@x, tests/pjit_test.py test_dynamic_slice). One scalar integer start index
// per dim, of one dtype.
// \error kInvalidArgument: index count or rank, index dtype, slice sizes
//   negative or past the operand, "dynamic_slice on sharded dims where out dim
//   (3) is not divisible by mesh axes (2) ...".
absl::StatusOr<ArrayType> DynamicSliceRule(const ArrayType& operand,
                                           absl::Span<const ArrayType> start_indices,
                                           const std::vector<int64_t>& slice_sizes);
// jnp.tile.
absl::StatusOr<ArrayType> TileRule(const ArrayType& operand, const std::vector<int64_t>& reps);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_CONCAT_SLICE_H_
