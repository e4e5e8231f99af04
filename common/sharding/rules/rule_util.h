// Machinery shared by every sharding rule (JAX: jax/_src/lax/utils.py
// call_sharding_rule / call_shape_dtype_sharding_rule, sharding_impls.py
// canonicalize_sharding, core.py get_sharding / str_short).
//
// Every rule in this folder follows the same skeleton, as JAX's abstract eval:
//   1. shape checks (the op's shape rule)          -> kInvalidArgument
//   2. `out_sharding` canonicalisation            -> ParseOutSharding
//   3. the mesh the op runs on                    -> CommonMesh
//   4. if the mesh has no Explicit axis, the rule is skipped: result P()
//      (RulesActive; JAX call_sharding_rule)
//   5. the op's own rule over the Explicit-only entries of the inputs
//   6. FinishResult: duplicate-axis check ("... produces an illegally sharded
//      result: f32[8@x,8@x]"), divisibility (core._check_divisibility), build
//      the ArrayType; varying axes are the union of the operands'.
//
// Vocabulary: an *entry* is one dim's list of mesh axes (empty = None), major
// to minor; `Entries` is one per dim, padded to the rank.
//
// Every ShardingTypeError/TypeError/ValueError of JAX maps to
// kInvalidArgument; a missing rule maps to kUnimplemented.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_RULE_UTIL_H_
#define MESHSERVE_COMMON_SHARDING_RULES_RULE_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {
namespace rules {

using Entry = PartitionSpec::Entry;
using Entries = std::vector<Entry>;
using Shape = std::vector<int64_t>;

// True when the rules run on `mesh`: at least one Explicit axis.
bool RulesActive(const Mesh& mesh);

// The entries of `type`, padded to its rank, with Auto/Manual axes removed
// (what jax.typeof(x).sharding.spec shows).
Entries ExplicitEntries(const ArrayType& type);

// Product of the sizes of the axes in `entry` (unknown axes count as 1).
int64_t EntrySize(const Mesh& mesh, const Entry& entry);

// The mesh `prim` runs on: the first operand with a non-empty mesh; every
// other non-empty mesh must equal it.
// \error kInvalidArgument "Mesh for all inputs should be equal. Got one mesh:
//   ... and another mesh: ..." (dot_general: "Mesh of both lhs and rhs should
//   match").
absl::StatusOr<Mesh> CommonMesh(absl::string_view prim,
                                absl::Span<const ArrayType* const> operands);

// canonicalize_sharding for an `out_sharding=` argument of `prim` of rank
// `rank` on `mesh`: returns the spec padded to `rank`.
// \error kInvalidArgument
//   "Using PartitionSpec when you are not under a mesh context is not allowed"
//     (empty mesh);
//   "Resource axis: z of P('z') is not found in mesh" (unknown axis);
//   "PartitionSpec passed to <prim> cannot contain axis names that are of type
//     Auto or Manual" (entries or unreduced naming a non-Explicit axis);
//   "A single NamedSharding spec specification can map every mesh axis to at
//     most one positional dimension" (duplicates, unreduced overlapping);
//   "Length of sharding.spec (4) must be equal to aval's ndim (3)" (too long).
absl::StatusOr<PartitionSpec> ParseOutSharding(absl::string_view prim,
                                               const Mesh& mesh,
                                               const PartitionSpec& out_sharding,
                                               int rank);

// Type of a result when the rules are skipped (no Explicit axis): P().
absl::StatusOr<ArrayType> UnshardedResult(DType dtype, Shape shape,
                                          const Mesh& mesh,
                                          absl::Span<const ArrayType* const> operands);

// Steps 6 above. `operands` are only used for the error message and the
// varying set.
// \error kInvalidArgument "<prim> operation with inputs: f32[8@x,2],
//   f32[2,8@x] produces an illegally sharded result: f32[8@x,8@x]";
//   divisibility: "... does not evenly divide the dimension size ...".
absl::StatusOr<ArrayType> FinishResult(absl::string_view prim,
                                       absl::Span<const ArrayType* const> operands,
                                       DType dtype, Shape shape, const Mesh& mesh,
                                       Entries entries,
                                       std::vector<std::string> unreduced = {});

// slicing._get_sharding_for_varying_out_shape: each dim of `operand` whose
// size changes in `out_shape` (compared position by position) and is sharded
// must stay divisible by its axes; returns the operand's entries unchanged.
// \error kInvalidArgument "<name> on sharded dims where out dim (3) is not
//   divisible by mesh axes (2) with spec ('x') is not implemented. ..."
absl::StatusOr<Entries> VaryingOutShapeEntries(absl::string_view name, const Mesh& mesh,
                                               const ArrayType& operand,
                                               absl::Span<const int64_t> out_shape);

// Every result shape passes this: dims >= 0 and at most 2^62 elements.
// \error kInvalidArgument naming the shape.
absl::Status CheckResultShape(absl::string_view prim, absl::Span<const int64_t> shape);

// Canonicalises a possibly negative dim index into [0, rank).
// \error kInvalidArgument "<what> <dim> is out of bounds for array of rank R".
absl::StatusOr<int> CanonicalizeDim(int64_t dim, int rank, absl::string_view what);

// True for the integer dtypes (index arrays of gather / dynamic_slice).
bool IsIntegerDType(DType dtype);

// Pointers to the operands, for the rules that take a span of pointers.
std::vector<const ArrayType*> Pointers(absl::Span<const ArrayType> operands);

// The union of the operands' varying axes, in mesh order.
std::vector<std::string> UnionVarying(const Mesh& mesh,
                                      absl::Span<const ArrayType* const> operands);

}  // namespace rules
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_RULE_UTIL_H_
