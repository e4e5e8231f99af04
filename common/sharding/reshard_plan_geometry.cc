#include "common/sharding/reshard_plan_geometry.h"

#include <algorithm>
#include <utility>

#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace reshard_internal {
namespace {

// Row-major stride of every mesh axis.
std::vector<int64_t> AxisStrides(const Mesh& mesh) {
  std::vector<int64_t> strides(mesh.num_axes(), 1);
  for (int a = mesh.num_axes() - 2; a >= 0; --a) {
    strides[a] = strides[a + 1] * mesh.axis(a + 1).size;
  }
  return strides;
}

}  // namespace

int64_t CoordAlongAxis(const Mesh& mesh, int64_t device, int axis) {
  MS_DCHECK(axis >= 0 && axis < mesh.num_axes());
  int64_t stride = 1;
  for (int a = axis + 1; a < mesh.num_axes(); ++a) stride *= mesh.axis(a).size;
  return (device / stride) % mesh.axis(axis).size;
}

std::vector<int64_t> PartialIndexByDevice(const Mesh& mesh,
                                          absl::Span<const int> axis_indices) {
  const std::vector<int64_t> strides = AxisStrides(mesh);
  std::vector<int64_t> index(mesh.num_devices(), 0);
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    int64_t g = 0;
    for (int a : axis_indices) {
      g = g * mesh.axis(a).size + (d / strides[a]) % mesh.axis(a).size;
    }
    index[d] = g;
  }
  return index;
}

absl::StatusOr<ShardGrid> ShardGrid::Create(absl::Span<const int64_t> shape,
                                            const NamedSharding& sharding) {
  const Mesh& mesh = sharding.mesh();
  const PartitionSpec& spec = sharding.spec();
  const int rank = static_cast<int>(shape.size());
  if (spec.size() != rank) {
    return InvalidArgument("spec ", spec.ToString(), " has ", spec.size(),
                           " entries but the shape has rank ", rank);
  }
  ShardGrid grid;
  grid.shape_.assign(shape.begin(), shape.end());
  grid.num_shards_.assign(rank, 1);
  grid.chunk_.assign(rank, 0);
  grid.tuple_strides_.assign(rank, 1);
  // Axis indices of each dim's entry, major to minor.
  std::vector<std::vector<int>> dim_axes(rank);
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      return InvalidArgument("dim ", i, " of the shape has negative size ",
                             shape[i]);
    }
    for (const std::string& name : spec.entry(i)) {
      std::optional<int> axis = mesh.AxisIndex(name);
      if (!axis.has_value()) {
        return InvalidArgument("axis '", name, "' of ", spec.ToString(),
                               " is not in ", mesh.ToString());
      }
      dim_axes[i].push_back(*axis);
      grid.num_shards_[i] *= mesh.axis(*axis).size;
    }
    grid.chunk_[i] = grid.num_shards_[i] == 0
                         ? 0
                         : CeilOfRatio(shape[i], grid.num_shards_[i]);
  }
  for (int i = rank - 1; i >= 0; --i) {
    if (i + 1 < rank) {
      grid.tuple_strides_[i] = grid.tuple_strides_[i + 1] * grid.num_shards_[i + 1];
    }
  }
  grid.num_shard_tuples_ = rank == 0 ? 1 : grid.tuple_strides_[0] * grid.num_shards_[0];

  const std::vector<int64_t> strides = AxisStrides(mesh);
  grid.device_shard_.assign(mesh.num_devices(), 0);
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    int64_t linear = 0;
    for (int i = 0; i < rank; ++i) {
      int64_t j = 0;
      for (int a : dim_axes[i]) {
        j = j * mesh.axis(a).size + (d / strides[a]) % mesh.axis(a).size;
      }
      linear += j * grid.tuple_strides_[i];
    }
    grid.device_shard_[d] = linear;
  }
  return grid;
}

Interval ShardGrid::ShardInterval(int dim, int64_t j) const {
  const int64_t d = shape_[dim];
  return Interval{std::min(j * chunk_[dim], d), std::min((j + 1) * chunk_[dim], d)};
}

Box ShardGrid::ShardBox(int64_t linear) const {
  std::vector<Interval> dims(rank());
  for (int i = 0; i < rank(); ++i) {
    dims[i] = ShardInterval(i, (linear / tuple_strides_[i]) % num_shards_[i]);
  }
  return Box(std::move(dims));
}

std::vector<DimOverlap> OverlapsAlongDim(const ShardGrid& src,
                                         const ShardGrid& dst, int dim) {
  MS_DCHECK(src.shape()[dim] == dst.shape()[dim]);
  std::vector<DimOverlap> out;
  int64_t js = 0;
  int64_t jd = 0;
  // Merge of two partitions of [0, d): advance whichever interval ends first.
  while (js < src.num_shards(dim) && jd < dst.num_shards(dim)) {
    const Interval a = src.ShardInterval(dim, js);
    const Interval b = dst.ShardInterval(dim, jd);
    const Interval both{std::max(a.begin, b.begin), std::min(a.end, b.end)};
    if (!both.empty()) out.push_back(DimOverlap{js, jd, both});
    if (a.end < b.end) {
      ++js;
    } else if (b.end < a.end) {
      ++jd;
    } else {
      ++js;
      ++jd;
    }
  }
  return out;
}

}  // namespace reshard_internal
}  // namespace meshserve
