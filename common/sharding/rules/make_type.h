// The type of an array with a given shape and PartitionSpec: what
// jax.typeof(jax.device_put(x, NamedSharding(mesh, spec))) shows
// (jax/_src/core.py: get_sharding, _check_divisibility, str_short_aval).
//
//   mesh (model=2, data=2), f32[128,64] P(('model','data'),None)
//     -> "float32[128@(model,data),64]"
//   mesh (x=2), i32[5,2] P('x') -> "Sharding spec ('x',) implies that array
//     axis 0 is partitioned 2 times, but does not evenly divide the dimension
//     size 5. ..."
// Only Explicit axes enter the type: Auto/Manual axes are removed from the
// entries (mesh x:Explicit, y:Auto: P(('x','y'),None) -> P('x',None)).
#ifndef MESHSERVE_COMMON_SHARDING_RULES_MAKE_TYPE_H_
#define MESHSERVE_COMMON_SHARDING_RULES_MAKE_TYPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/dtype.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// \error kInvalidArgument: negative dims, unknown or duplicate axes, a spec
//   longer than the rank, divisibility.
absl::StatusOr<ArrayType> MakeTypeRule(DType dtype, const std::vector<int64_t>& shape,
                                       const Mesh& mesh, const PartitionSpec& spec);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_MAKE_TYPE_H_
