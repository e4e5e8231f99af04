#include "common/sharding/shard_layout.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

// Per-dim precomputation: the mesh-axis indices of the dim's entry (major to
// minor) and the number of shards K along it.
struct DimAxes {
  std::vector<int> axes;
  int64_t num_shards = 1;
};

struct Layout {
  std::vector<int64_t> axis_stride;  // row-major device stride of each axis
  std::vector<int64_t> axis_size;
  std::vector<DimAxes> dims;

  int64_t Coord(int64_t device, int axis) const {
    return (device / axis_stride[axis]) % axis_size[axis];
  }
  int64_t ShardIndex(int64_t device, int dim) const {
    int64_t j = 0;
    for (int a : dims[dim].axes) j = j * axis_size[a] + Coord(device, a);
    return j;
  }
};

Layout MakeLayout(const NamedSharding& sharding) {
  const Mesh& mesh = sharding.mesh();
  Layout layout;
  layout.axis_stride.resize(mesh.num_axes());
  layout.axis_size.resize(mesh.num_axes());
  int64_t stride = 1;
  for (int a = mesh.num_axes() - 1; a >= 0; --a) {
    layout.axis_stride[a] = stride;
    layout.axis_size[a] = mesh.axis(a).size;
    stride *= mesh.axis(a).size;
  }
  layout.dims.resize(sharding.rank());
  for (int d = 0; d < sharding.rank(); ++d) {
    for (const std::string& name : sharding.spec().entry(d)) {
      std::optional<int> a = mesh.AxisIndex(name);
      MS_DCHECK(a.has_value());  // NamedSharding invariant: axes are in the mesh
      if (!a.has_value()) continue;
      layout.dims[d].axes.push_back(*a);
      layout.dims[d].num_shards *= mesh.axis(*a).size;
    }
  }
  return layout;
}

// [min(j*c, d), min((j+1)*c, d)) with c = ceil(d / K).
// Written so that no intermediate overflows, whatever dim_size is.
Interval ShardInterval(int64_t dim_size, int64_t num_shards, int64_t j) {
  const int64_t chunk =
      dim_size / num_shards + (dim_size % num_shards != 0 ? 1 : 0);
  auto offset = [&](int64_t k) {
    // min(k * chunk, dim_size); k * chunk <= dim_size when k <= dim_size / chunk.
    return chunk == 0 || k > dim_size / chunk ? dim_size : k * chunk;
  };
  return Interval{offset(j), offset(j + 1)};
}

Box BoxFromLayout(absl::Span<const int64_t> shape, const Layout& layout,
                  int64_t device) {
  std::vector<Interval> dims(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    dims[d] = ShardInterval(shape[d], layout.dims[d].num_shards,
                            layout.ShardIndex(device, static_cast<int>(d)));
  }
  return Box(std::move(dims));
}

}  // namespace

int64_t ShardIndexAlongDim(const NamedSharding& sharding, int64_t device,
                           int dim) {
  MS_DCHECK(device >= 0 && device < sharding.mesh().num_devices());
  MS_DCHECK(dim >= 0 && dim < sharding.rank());
  const Mesh& mesh = sharding.mesh();
  const std::vector<int64_t> coords = mesh.UncheckedCoordsOfDevice(device);
  int64_t j = 0;
  for (const std::string& name : sharding.spec().entry(dim)) {
    std::optional<int> a = mesh.AxisIndex(name);
    if (!a.has_value()) continue;
    j = j * mesh.axis(*a).size + coords[*a];
  }
  return j;
}

Box ShardBoxForDevice(absl::Span<const int64_t> shape,
                      const NamedSharding& sharding, int64_t device) {
  MS_DCHECK(static_cast<int>(shape.size()) == sharding.rank());
  MS_DCHECK(device >= 0 && device < sharding.mesh().num_devices());
  std::vector<Interval> dims(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    const int dim = static_cast<int>(d);
    dims[d] = ShardInterval(shape[d], sharding.NumShardsAlongDim(dim),
                            ShardIndexAlongDim(sharding, device, dim));
  }
  return Box(std::move(dims));
}

absl::StatusOr<Box> CheckedShardBoxForDevice(absl::Span<const int64_t> shape,
                                             const NamedSharding& sharding,
                                             int64_t device) {
  if (static_cast<int>(shape.size()) != sharding.rank()) {
    return InvalidArgument("shape of rank ", shape.size(), " does not match ",
                           sharding.ToString(), " of rank ", sharding.rank());
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return InvalidArgument("negative dimension ", shape[d], " at dim ", d);
    }
  }
  if (device < 0 || device >= sharding.mesh().num_devices()) {
    return OutOfRange("device ", device, " is outside ",
                      sharding.mesh().ToString(), " (",
                      sharding.mesh().num_devices(), " devices)");
  }
  return ShardBoxForDevice(shape, sharding, device);
}

std::vector<Box> ShardBoxesByDevice(absl::Span<const int64_t> shape,
                                    const NamedSharding& sharding) {
  MS_DCHECK(static_cast<int>(shape.size()) == sharding.rank());
  const Layout layout = MakeLayout(sharding);
  const int64_t num_devices = sharding.mesh().num_devices();
  std::vector<Box> boxes;
  boxes.reserve(num_devices);
  for (int64_t device = 0; device < num_devices; ++device) {
    boxes.push_back(BoxFromLayout(shape, layout, device));
  }
  return boxes;
}

std::vector<std::vector<int64_t>> ReplicaGroups(const NamedSharding& sharding) {
  const Mesh& mesh = sharding.mesh();
  const Layout layout = MakeLayout(sharding);
  // Axes that distinguish shards: those in the entries and the unreduced axes.
  std::vector<int> key_axes;
  for (const DimAxes& d : layout.dims) {
    key_axes.insert(key_axes.end(), d.axes.begin(), d.axes.end());
  }
  for (const std::string& name : sharding.spec().unreduced()) {
    std::optional<int> a = mesh.AxisIndex(name);
    if (a.has_value()) key_axes.push_back(*a);
  }
  std::sort(key_axes.begin(), key_axes.end());
  key_axes.erase(std::unique(key_axes.begin(), key_axes.end()), key_axes.end());

  // The key (mixed radix over key_axes) is < num_devices, so a dense table works.
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> group_of_key(mesh.num_devices(), -1);
  for (int64_t device = 0; device < mesh.num_devices(); ++device) {
    int64_t key = 0;
    for (int a : key_axes) key = key * layout.axis_size[a] + layout.Coord(device, a);
    if (group_of_key[key] < 0) {
      group_of_key[key] = static_cast<int64_t>(groups.size());
      groups.emplace_back();
    }
    groups[group_of_key[key]].push_back(device);
  }
  return groups;
}

std::vector<int64_t> DevicesOverlappingBox(absl::Span<const int64_t> shape,
                                           const NamedSharding& sharding,
                                           const Box& box) {
  std::vector<int64_t> out;
  if (static_cast<int>(shape.size()) != sharding.rank() ||
      box.rank() != sharding.rank() || box.IsEmpty()) {
    return out;
  }
  const Layout layout = MakeLayout(sharding);
  for (int64_t device = 0; device < sharding.mesh().num_devices(); ++device) {
    bool overlaps = true;
    for (size_t d = 0; d < shape.size() && overlaps; ++d) {
      const Interval shard =
          ShardInterval(shape[d], layout.dims[d].num_shards,
                        layout.ShardIndex(device, static_cast<int>(d)));
      overlaps = !Intersect(shard, box[static_cast<int>(d)]).empty();
    }
    if (overlaps) out.push_back(device);
  }
  return out;
}

}  // namespace meshserve
