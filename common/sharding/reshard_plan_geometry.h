// Shard grids: the per-dim shard intervals of one sharding, indexed so that the
// reshard planner never compares every source device with every destination
// device.
//
// Notation as in shard_layout.h: dim i of size d_i is split in K_i shards of
// chunk c_i = ceil(d_i / K_i); shard j_i covers [min(j_i c_i, d_i),
// min((j_i + 1) c_i, d_i)). A *shard tuple* (j_0..j_{r-1}) is linearised
// row-major: s = ((j_0 K_1 + j_1) K_2 + ...) + j_{r-1}. Every device of the mesh
// maps to one shard tuple; devices with the same tuple hold the same box
// (replicas, or partial sums of it when they differ along an unreduced axis).
//
// The *partial index* of a device is its mixed-radix coordinate over a list of
// mesh axes (the unreduced axes, in mesh order): g = ((c[u_1] s_2 + c[u_2]) s_3
// + ...). With no unreduced axes every device has g = 0.
//
// Overlaps: along one dim, the source intervals and the destination intervals
// are two partitions of [0, d_i), so the overlapping (source shard, destination
// shard) pairs are found by one merge in O(Ks_i + Kd_i) and there are at most
// Ks_i + Kd_i - 1 of them. A pair of shard tuples overlaps iff every dim's pair
// does; their intersection is the product of the per-dim intersections.
//
// This file duplicates the geometry of shard_layout.h on purpose: the planner
// needs the shard index per dim for every device at once, computed in
// O(devices * axes); shard_layout_test-style cross checks live in
// reshard_plan_geometry_test.cc.
#ifndef MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_GEOMETRY_H_
#define MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {
namespace reshard_internal {

class ShardGrid {
 public:
  // \error kInvalidArgument when the spec's length differs from shape.size(),
  //   names an axis that is not in the mesh, or a dim is negative.
  static absl::StatusOr<ShardGrid> Create(absl::Span<const int64_t> shape,
                                          const NamedSharding& sharding);

  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_shards(int dim) const { return num_shards_[dim]; }
  // Product of num_shards over dims (1 for rank 0).
  int64_t num_shard_tuples() const { return num_shard_tuples_; }
  // Row-major stride of dim in the linearised shard tuple.
  int64_t tuple_stride(int dim) const { return tuple_strides_[dim]; }

  // Interval of shard j along dim (possibly empty under the uneven rule).
  Interval ShardInterval(int dim, int64_t j) const;
  // Linear shard tuple of every device, indexed by device id.
  const std::vector<int64_t>& device_shard() const { return device_shard_; }
  // Box of a linear shard tuple.
  Box ShardBox(int64_t linear) const;

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> num_shards_;
  std::vector<int64_t> chunk_;
  std::vector<int64_t> tuple_strides_;
  int64_t num_shard_tuples_ = 1;
  std::vector<int64_t> device_shard_;
};

// Mesh coordinate of `device` along axis `axis` (row-major mesh).
// Precondition (DCHECK): both in range.
int64_t CoordAlongAxis(const Mesh& mesh, int64_t device, int axis);

// Partial index of every device over `axis_indices` (in the order given).
std::vector<int64_t> PartialIndexByDevice(const Mesh& mesh,
                                          absl::Span<const int> axis_indices);

// One overlapping pair along one dim.
struct DimOverlap {
  int64_t src_shard = 0;
  int64_t dst_shard = 0;
  Interval interval;  // non-empty
};

// The overlapping (src shard, dst shard) pairs along `dim`, in increasing
// position. Empty intervals are skipped. Precondition: equal shape at dim.
std::vector<DimOverlap> OverlapsAlongDim(const ShardGrid& src,
                                         const ShardGrid& dst, int dim);

}  // namespace reshard_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_GEOMETRY_H_
