// jnp.einsum with two operands (jax/_src/numpy/einsum.py: _einsum,
// _get_inverse_sharding).
//
// jnp.einsum lowers a two-operand contraction to ONE dot_general, so every
// rule of dot_general.h applies, label by label:
//   * a label in both operands and in the output is a batch dim;
//   * a label in both operands but not in the output is contracted;
//   * a label in one operand only and not in the output is summed away first
//     (reduce_sum), which drops its sharding.
// JAX first tries dot_general(rhs, lhs) (when batch+rhs_free+lhs_free already
// is the output order) and otherwise dot_general(lhs, rhs); the result is then
// transposed into the output order, so each output label keeps the entry of
// the operand that owns it. `out_sharding` is written in output order and is
// permuted into dot_general's order (_get_inverse_sharding); the final result
// is exactly out_sharding.
//
// Examples (mesh x=2, y=2):
//   'btd,df->btf'  x:P('fsdp',None,None) w:P('fsdp','model') -> P('fsdp',None,'model')
//   'btd,dhq->bhtq' P('x','y',None), P(None,'x','y') -> (x,y,x,y): "produces an
//      illegally sharded result"; fine with out_sharding=P('x',None,'y',None).
// Implicit output (no "->") is numpy's: labels used once, sorted. Ellipsis and
// repeated labels within one operand (traces) are not supported
// (kUnimplemented).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_
#define MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// A two-operand equation as labels, one char per dim: "bqhd,bkhd->bhqk" is
// {lhs "bqhd", rhs "bkhd", out "bhqk"}. Without "->" the output is numpy's
// implicit one (labels used once, sorted) and explicit_output is false.
struct EinsumEquation {
  std::string lhs, rhs, out;
  bool explicit_output = false;
};

// The one einsum-equation parser of the tree (whitespace ignored).
// \error kInvalidArgument naming the equation: not exactly two operands, a
//   label that is not a letter, an output label repeated or in no operand.
// \error kUnimplemented for ellipsis or a label repeated within one operand.
absl::StatusOr<EinsumEquation> ParseEinsumEquation(absl::string_view text);

// \error kInvalidArgument for a malformed equation (naming it), label/rank or
//   size mismatches, and every dot_general sharding error.
// \error kUnimplemented for ellipsis or repeated labels in one operand.
absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation, const ArrayType& lhs,
                                     const ArrayType& rhs,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype = std::nullopt);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_
