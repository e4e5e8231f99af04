// Elementwise ops: n-ary broadcasting ops (add, mul, sub, ...), select, and
// unary ops (jax/_src/lax/lax.py: broadcasting_sharding_rule,
// _select_sharding_rule; jnp's rank promotion in jax/_src/numpy/util.py).
//
// N-ary (ElementwiseRule): scalars are ignored; lower-rank operands are lifted
// with leading size-1, unsharded dims (jnp rank promotion). Per dim i:
//   * all entries equal                  -> that entry;
//   * else drop operands with size 1 AND entry None; nothing left -> None;
//     the rest agree -> that entry;
//   * else scan: None is compatible with a sharded entry (the sharded one wins,
//     so [8@x] + [8] -> [8@x]); two different non-None entries ->
//     "<op> got incompatible shardings for broadcasting: ('x', 'y'), ('y', 'x')."
// Then the duplicate-axis check: [4,4]P('X',None) + [4,4]P(None,'X') ->
//   "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally
//   sharded result: f32[4@X,4@X]".
// Outer product: [4,1]P('X',None) + [1,8]P(None,'Y') -> [4@X,8@Y].
// Binary ops take no out_sharding (use reshard or auto_axes).
//
// select(pred, on_true, on_false) (as jnp.where: operands are first broadcast
// to the common shape, new dims unsharded; a scalar case takes the other
// case's sharding, as in jnp.where(x > 0, x, 0)): the cases must have identical
// shardings ("select cases must have the same shardings, got [...]"); pred must
// be scalar or have the cases' sharding ("select `which` must be scalar or have
// the same sharding as cases").
//
// Unary ops keep the operand's type.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_ELEMENTWISE_H_
#define MESHSERVE_COMMON_SHARDING_RULES_ELEMENTWISE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// `op_name` appears in the errors ("mul got incompatible shardings ...").
// Result dtype: the first non-scalar operand's (the first operand's when all
// are scalars).
// \error kInvalidArgument: no operands, incompatible shapes ("<op> got
//   incompatible shapes for broadcasting: (8, 2), (4, 2)."), incompatible
//   shardings, illegal result, meshes differing.
absl::StatusOr<ArrayType> ElementwiseRule(absl::string_view op_name,
                                          absl::Span<const ArrayType> operands);

// \error kInvalidArgument as above plus the select errors in the file comment.
absl::StatusOr<ArrayType> SelectRule(const ArrayType& pred, const ArrayType& on_true,
                                     const ArrayType& on_false);

// Unary elementwise op (exp, neg, silu, ...): the operand's type.
absl::StatusOr<ArrayType> UnaryRule(absl::string_view op_name, const ArrayType& operand);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_ELEMENTWISE_H_
