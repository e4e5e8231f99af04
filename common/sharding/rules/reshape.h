// lax.reshape's sharding rule (jax/_src/lax/lax.py: _reshape_sharding_rule,
// _split_merge_singleton_dim_sharding_rule, _split_on_one_axis,
// _merge_on_one_axis, _split_an_axis_sharding_rule,
// _merge_an_axis_sharding_rule, split_partitions).
//
// out_sharding given -> it is the result. Otherwise:
//   1. operand fully replicated                  -> all None;
//   2. only size-1 dims added/removed            -> non-1 dims keep their
//      entries in order, new 1-dims get None;
//   3. exactly one dim split into consecutive dims (others unchanged): a None
//      dim gives None pieces; axes (a1, a2, ...) are handed out greedily from
//      the first piece: a piece of size n takes axes while n > 1, dividing n by
//      each axis size; a remainder is an error.
//        (8,)P(('x','y')) -> (2,4): P('x','y');  -> (4,2): P(('x','y'),None)
//        (4,6,8)P('x','y',None) -> (4,2,3,8): P('x','y',None,None)
//        (4,6,8)P('x','y',None) -> (4,3,2,8): error (3 % |y| != 0)
//   4. exactly one group of consecutive dims merged: all None -> None; else the
//      entries are flattened, trailing Nones dropped, a None left (unsharded
//      dim before a sharded one) is an error; the axes must divide the size.
//        (2,4)P('x','y') -> (8,): P(('x','y'))
//        (4,2,3,8)P(None,'y',None,'x') -> (4,6,8): P(None,'y','x')
//        (2,2,2)P('x',None,'y') -> (8,): error
//   5. anything else (two splits, split + merge, ...) is an error.
// Every error is "This reshape is not supported. Please specify the sharding of
// the output via the `out_sharding` argument of jax.lax.reshape. Got operand
// type: ..., new sizes: ...".
// `dimensions` (a permutation, order='F') makes any sharded split/merge an
// error.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_RESHAPE_H_
#define MESHSERVE_COMMON_SHARDING_RULES_RESHAPE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// \error kInvalidArgument: negative sizes or a changed total size ("reshape
//   total size must be unchanged"), and the errors in the file comment.
absl::StatusOr<ArrayType> ReshapeRule(const ArrayType& operand,
                                      const std::vector<int64_t>& new_sizes,
                                      const std::optional<PartitionSpec>& out_sharding,
                                      const std::optional<std::vector<int64_t>>& dimensions =
                                          std::nullopt);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_RESHAPE_H_
