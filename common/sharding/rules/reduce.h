// Reductions and scans (jax/_src/lax/lax.py: _reduce_op_sharding_rule,
// _reduce_op_sharding_rule_with_out_sharding; jax/_src/lax/control_flow/
// loops.py and lax.py: _cumred_sharding_rule; jnp.cumsum).
//
// reduce_sum / reduce_max / reduce_min / reduce_prod / argmax ...: the reduced
// dims' entries are dropped, the others kept. Reducing a sharded dim is fine:
// the axis leaves the type (XLA all-reduces).
//   [8@x,2@y].sum(0) -> [2@y];   .sum() -> P();   P(('x','y'),None).sum(1) -> P(('x','y'))
// out_sharding (lax.reduce_sum(..., out_sharding=)) overrides, mostly to ask
// for an unreduced result; its unreduced axes must come from the reduced dims:
// "out_sharding's unreduced axes should be in operand's specs that were
// reduce_sum over".
//
// cumsum / cumprod / cummax (axis given): the scanned dim must be unsharded,
// "Input should be unsharded over the axis being reduced"; the result keeps
// the operand's sharding. axis = None (flattening cumsum) needs a fully
// replicated input: "The input should be fully replicated".
#ifndef MESHSERVE_COMMON_SHARDING_RULES_REDUCE_H_
#define MESHSERVE_COMMON_SHARDING_RULES_REDUCE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// `axes` nullopt reduces every dim. `op_name`: "reduce_sum", "reduce_max", ...
// \error kInvalidArgument for bad axes and the errors in the file comment.
absl::StatusOr<ArrayType> ReduceRule(absl::string_view op_name, const ArrayType& operand,
                                     const std::optional<std::vector<int64_t>>& axes,
                                     const std::optional<PartitionSpec>& out_sharding =
                                         std::nullopt);

// `axis` nullopt: flattening scan.
absl::StatusOr<ArrayType> CumulativeRule(absl::string_view op_name, const ArrayType& operand,
                                         std::optional<int64_t> axis);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_REDUCE_H_
