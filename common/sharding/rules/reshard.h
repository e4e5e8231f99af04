// Changing a type's sharding on purpose: jax.sharding.reshard,
// jax.sharding.auto_axes, and the per-device view inside jax.shard_map
// (jax/_src/pjit.py: reshard, _auto_axes; jax/_src/shard_map.py).
//
// reshard(x, out_sharding): the result type is exactly out_sharding (padded
//   to the rank, Explicit axes only, divisibility checked). None is an error:
//   "Reshard should only be used with out_shardings which are non-None".
//     [8@x,2@y] reshard P('x',None) -> [8@x,2]
//
// auto_axes(f, axes=None, out_sharding=...)(*args): the listed axes (default
//   all) become Auto in the body, the arguments lose them, `f` runs with the
//   remaining rules (so shape errors and rules on still-Explicit axes apply),
//   and the result is resharded to out_sharding, which is required: "Missing
//   required keyword argument: 'out_sharding'".
//     auto_axes(dot, out_sharding=P('x',None))(f32[8@x,2@y], f32[2@y,8@x])
//       -> f32[8@x,8] (the ambiguous contraction is the compiler's business)
//
// shard_map body type (shard_map(f, in_specs=spec, axis_names=manual)): inside
//   the body the manual axes are Manual: they leave the spec, divide the local
//   shape, and the value is varying over those of them its spec mentions
//   ({V:x}). Other axes stay Explicit.
//     global int32[8,2] P('x','y'), manual {x} -> int32[4,2@y]{V:x}
#ifndef MESHSERVE_COMMON_SHARDING_RULES_RESHARD_H_
#define MESHSERVE_COMMON_SHARDING_RULES_RESHARD_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// \error kInvalidArgument: out_sharding missing, or any out_sharding error
//   (rules/rule_util.h ParseOutSharding) or divisibility error.
absl::StatusOr<ArrayType> ReshardRule(const ArrayType& operand,
                                      const std::optional<PartitionSpec>& out_sharding);

// The op run inside auto_axes: receives the arguments with the auto axes
// removed (their meshes have those axes Auto).
using InnerOpFn = std::function<absl::StatusOr<ArrayType>(absl::Span<const ArrayType>)>;

// `axes` nullopt: every mesh axis.
// \error kInvalidArgument: out_sharding missing, unknown axes, inner errors,
//   out_sharding errors. kUnimplemented when an axis is Manual ("Going from
//   `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed").
absl::StatusOr<ArrayType> AutoAxesRule(absl::Span<const ArrayType> operands,
                                       const std::optional<PartitionSpec>& out_sharding,
                                       const std::optional<std::vector<std::string>>& axes,
                                       const InnerOpFn& inner);

// `manual_axes` nullopt: every mesh axis.
// \error kInvalidArgument for unknown axes or a dim not divisible by its
//   manual axes.
absl::StatusOr<ArrayType> ShardMapBodyTypeRule(
    const ArrayType& operand, const std::optional<std::vector<std::string>>& manual_axes);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_RESHARD_H_
