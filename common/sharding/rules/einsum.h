// jnp.einsum (jax/_src/numpy/einsum.py: einsum, _einsum,
// _get_inverse_sharding; the contraction order from opt_einsum.contract_path).
//
// The equation is parsed as opt_einsum does: "..." becomes the first unused
// letters (a-z, then A-Z), right-aligned per operand; without "->" the output
// is those ellipsis labels followed by the labels used once, sorted. Size-1
// dims broadcast against any size.
//
// The operands are contracted pairwise along opt_einsum's path for JAX's
// default optimize="auto": one operand -> [(0,)], two -> [(0, 1)], three or
// four -> the "optimal" search (depth first over all pairs, cost = size of the
// pair's labels x (2 if a label is summed, else 1), first minimum kept, the
// pair-result cache keyed by the two label sets as in opt_einsum); five or more
// (branch/greedy searches in opt_einsum) are kUnimplemented. Intermediate
// labels are in order of first appearance in the pair (popped highest index
// first), the last step writes the output order.
//
// Each step is what _einsum does, so every rule it calls applies:
//   * one operand: labels summed away are reduce_sum'd (which drops their
//     sharding), repeated labels (a trace 'ii->' or a diagonal 'ii->i') are
//     first masked with select(eye, x, 0): the eye is unsharded, so a SHARDED
//     operand fails with "select `which` must be scalar or have the same
//     sharding as cases";
//   * two operands: size-1 dims facing a larger dim are squeezed, labels in one
//     operand only and not kept are summed away, repeated labels as above, then
//     ONE dot_general (dot_general.h: batch = labels in both and in the result,
//     contracting = summed labels in both); (rhs, lhs) is tried first when it
//     gives the result order without a transpose, else (lhs, rhs);
//   * the result is transposed into the step's output order.
// `out_sharding` (output-label order) goes to the one dot_general (permuted
// into its order by _get_inverse_sharding) or to the reductions of a
// one-operand einsum; with two or more steps the whole einsum runs under
// auto_axes over the Explicit axes and the result is exactly out_sharding
// (test_intermediate_einsum).
//
// Examples (mesh x=2, y=2):
//   'btd,df->btf'  x:P('fsdp',None,None) w:P('fsdp','model') -> P('fsdp',None,'model')
//   'btd,dhq->bhtq' P('x','y',None), P(None,'x','y') -> (x,y,x,y): "produces an
//      illegally sharded result"; fine with out_sharding=P('x',None,'y',None).
//   '...ij,jk->...ik' f32[8@x,4,6] . f32[6,2@y] -> f32[8@x,4,2@y]
//   'ab,bc,cd->ad' with a=8, b=4, c=16, d=2: (bc,cd) first (cost 256, then
//      128 for (ab,bd)); with a=2, d=64: (ab,bc) first. The order decides
//      which dot_general rules run: P('x',None), P(None,'x'), P() types in the
//      first case and is "illegally sharded" (ac on x twice) in the second.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_
#define MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
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

// The two-operand form the compiler lowers (whitespace ignored).
// \error kInvalidArgument naming the equation: not exactly two operands, a
//   label that is not a letter, an output label repeated or in no operand.
// \error kUnimplemented for ellipsis or a label repeated within one operand.
absl::StatusOr<EinsumEquation> ParseEinsumEquation(absl::string_view text);

// Any number of operands, "..." expanded for operands of ranks `ranks` (one
// per operand). `inputs` has one label string per operand.
struct EinsumSubscripts {
  std::vector<std::string> inputs;
  std::string out;
  bool explicit_output = false;
};

// The one einsum-equation parser of the tree (ParseEinsumEquation uses it).
// \error kInvalidArgument naming the equation: operand count not ranks.size()
//   ("Number of einsum subscripts must be equal to the number of operands"),
//   invalid ellipsis, a label that is not a letter, an output label repeated
//   or in no operand.
absl::StatusOr<EinsumSubscripts> ParseEinsumSubscripts(absl::string_view text,
                                                       absl::Span<const int> ranks);

// \error kInvalidArgument for a malformed equation (naming it), label/rank or
//   size mismatches, and every error of the rules each step calls.
// \error kUnimplemented for five or more operands.
absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation,
                                     absl::Span<const ArrayType> operands,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype = std::nullopt);
// Two operands.
absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation, const ArrayType& lhs,
                                     const ArrayType& rhs,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype = std::nullopt);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_EINSUM_H_
