// Shard geometry: which box of a tensor each mesh device holds.
//
// Notation: shape d_0..d_{r-1}; dim i's entry names axes (a_1..a_k), major to
// minor, with sizes s_1..s_k; K_i = s_1*...*s_k shards along dim i. A device
// with mesh coordinates c has shard index along dim i
//     j_i = ((c[a_1] * s_2 + c[a_2]) * s_3 + ...) + c[a_k]      (mixed radix)
// and holds, along dim i, the interval (XLA TileOffsetForDevice/TileLimitForDevice)
//     [min(j_i * ceil(d_i / K_i), d_i),  min((j_i + 1) * ceil(d_i / K_i), d_i)).
// JAX types always divide evenly; the uneven (ceil, clamped) rule is kept so that
// geometry is total. numpy, for P('x', None) on mesh (x=2, y=4) and shape (8, 6):
//     x[4 * (dev // 4) : 4 * (dev // 4) + 4, :]
//
// Guarantees: for every sharding, the boxes of one replica group's
// representative devices (one per distinct shard) tile the full box exactly;
// devices in one replica group hold identical boxes.
//
// Unreduced axes do not change a device's box: devices differing only along an
// unreduced axis hold partial sums of the same box.
#ifndef MESHSERVE_COMMON_SHARDING_SHARD_LAYOUT_H_
#define MESHSERVE_COMMON_SHARDING_SHARD_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding/box.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// j_i above. Precondition (DCHECK): device in range, dim < rank.
int64_t ShardIndexAlongDim(const NamedSharding& sharding, int64_t device, int dim);

// The box `device` holds. Precondition: shape.size() == sharding.rank(),
// 0 <= device < mesh.num_devices() (DCHECK). Use the checked twin on input.
Box ShardBoxForDevice(absl::Span<const int64_t> shape,
                      const NamedSharding& sharding, int64_t device);
// \error kOutOfRange for a device outside the mesh; kInvalidArgument for a
// rank mismatch.
absl::StatusOr<Box> CheckedShardBoxForDevice(absl::Span<const int64_t> shape,
                                             const NamedSharding& sharding,
                                             int64_t device);

// Box of every device, indexed by device id.
std::vector<Box> ShardBoxesByDevice(absl::Span<const int64_t> shape,
                                    const NamedSharding& sharding);

// Devices that hold the same box, grouped: each group sorted ascending, groups
// ordered by their first device. For P('x', None) on (x=2, y=2): {{0,1},{2,3}}.
// Unreduced axes split groups (their devices hold different partial sums).
std::vector<std::vector<int64_t>> ReplicaGroups(const NamedSharding& sharding);

// Devices whose box overlaps `box` in at least one element (ascending). Empty
// for an empty `box` or when shape, sharding and box ranks differ.
std::vector<int64_t> DevicesOverlappingBox(absl::Span<const int64_t> shape,
                                           const NamedSharding& sharding,
                                           const Box& box);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_SHARD_LAYOUT_H_
