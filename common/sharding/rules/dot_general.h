// dot_general's sharding rule (jax/_src/lax/lax.py: _dot_general_sharding_rule,
// _dot_general_sharding_computation, _dot_general_unreduced_rule).
//
// Checks, in JAX's order:
//   1. lhs and rhs meshes match (unless one is empty).
//   2. out_sharding given -> it is the result as is; batch/contracting checks
//      are skipped (XLA inserts the collective). Only the unreduced checks run.
//   3. batch dims: lhs and rhs entries must be identical, else
//      "dot_general requires lhs batch dimensions and rhs batch dimensions to
//      have the same sharding, got (...) and (...)."
//   4. contracting pairs sharded on BOTH sides -> "Contracting dimensions are
//      sharded and it is ambiguous how the output should be sharded. Please
//      specify the output sharding via the `out_sharding` parameter. Got
//      lhs_contracting_spec=... and rhs_contracting_spec=..." (even for the same
//      axis). Sharded on one side only: the axis just disappears (FSDP).
//   5. result = lhs batch entries + lhs free entries + rhs free entries, then
//      the duplicate-axis check ("produces an illegally sharded result").
//   6. unreduced out_sharding: inputs not unreduced; lhs/rhs contracting specs
//      identical; unreduced set == axes of the contracting specs.
//
// Examples (mesh x=2, y=2; f32[8,2] . f32[2,8], contracting (1),(0)):
//   P('x',None) . P(None,'y')  -> f32[8@x,8@y]
//   P('x','y')  . P(None,None) -> f32[8@x,8]        (lhs contracting y dropped)
//   P('x',None) . P(None,'x')  -> error "produces an illegally sharded result"
//   P('x','y')  . P('y',None)  -> error "Contracting dimensions are sharded"
//   SwiGLU down projection bf16[8@fsdp,4096,8192@model] . bf16[8192@model,2048@fsdp]
//     out_sharding=P('fsdp',None,None, unreduced={'model'})
//     -> bf16[8@fsdp,4096,2048]{U:model}
#ifndef MESHSERVE_COMMON_SHARDING_RULES_DOT_GENERAL_H_
#define MESHSERVE_COMMON_SHARDING_RULES_DOT_GENERAL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/dtype.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)) as in lax.
struct DotDimensionNumbers {
  std::vector<int64_t> lhs_contracting;
  std::vector<int64_t> rhs_contracting;
  std::vector<int64_t> lhs_batch;
  std::vector<int64_t> rhs_batch;
};

// The type of lax.dot_general(lhs, rhs, dims, out_sharding=...,
// preferred_element_type=out_dtype). `out_dtype` nullopt: lhs's dtype.
// \error kInvalidArgument for bad dimension numbers or shapes (JAX's
//   TypeError texts) and for every sharding error listed in the file comment.
absl::StatusOr<ArrayType> DotGeneralRule(const ArrayType& lhs, const ArrayType& rhs,
                                         const DotDimensionNumbers& dims,
                                         const std::optional<PartitionSpec>& out_sharding,
                                         std::optional<DType> out_dtype = std::nullopt);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_DOT_GENERAL_H_
