// Ops that move, add or drop dims without touching data placement rules:
// transpose, squeeze, expand_dims, broadcast_to / broadcast_in_dim
// (jax/_src/lax/lax.py: _transpose_sharding_rule, _squeeze_sharding_rule,
// _broadcast_in_dim_sharding_rule; jnp.expand_dims, jnp.broadcast_to).
//
//   transpose:      out[i] = in[perm[i]]
//                   [4@x,2@y,2@z] perm (1,2,0) -> [2@y,2@z,4@x]
//   squeeze:        drops the squeezed dims' entries (they must have size 1)
//   expand_dims:    new dims are None: [8@x,2@y] axis 2 -> [8@x,2@y,1]
//   broadcast_to:   jnp: leading new dims None; dims broadcast from size 1 are
//                   squeezed and re-added, so None; other dims keep their
//                   entries. out_sharding overrides (and may shard new dims).
#ifndef MESHSERVE_COMMON_SHARDING_RULES_LAYOUT_OPS_H_
#define MESHSERVE_COMMON_SHARDING_RULES_LAYOUT_OPS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// \error kInvalidArgument when perm is not a permutation of the dims.
absl::StatusOr<ArrayType> TransposeRule(const ArrayType& operand,
                                        const std::vector<int64_t>& perm);

// `dimensions` nullopt squeezes every size-1 dim (jnp.squeeze default).
// \error kInvalidArgument for an out-of-range/duplicate dim or one of size != 1.
absl::StatusOr<ArrayType> SqueezeRule(const ArrayType& operand,
                                      const std::optional<std::vector<int64_t>>& dimensions);

// jnp.expand_dims: `axes` index the result (negative allowed).
// \error kInvalidArgument for out-of-range or repeated axes.
absl::StatusOr<ArrayType> ExpandDimsRule(const ArrayType& operand,
                                         const std::vector<int64_t>& axes);

// jnp.broadcast_to(operand, shape, out_sharding=...).
// \error kInvalidArgument "Incompatible shapes for broadcasting: (..) and
//   requested shape (..)", and out_sharding errors.
absl::StatusOr<ArrayType> BroadcastToRule(const ArrayType& operand,
                                          const std::vector<int64_t>& shape,
                                          const std::optional<PartitionSpec>& out_sharding);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_LAYOUT_OPS_H_
