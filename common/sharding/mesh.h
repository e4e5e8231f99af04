// A named device mesh, as jax.make_mesh((2, 4), ('fsdp', 'model')).
//
// Axes are ordered (the first is major). Devices are mesh slots numbered
// row-major over the axes: with axes (a: 2, b: 4), device 5 has coordinates
// (a=1, b=1); numpy: np.arange(8).reshape(2, 4)[1, 1] == 5. A *worker* (a
// process) hosts one or more devices; the mapping lives outside the mesh.
//
// Each axis has a type (jax.sharding.AxisType): Explicit axes are part of array
// types and the sharding rules see them; Auto axes are chosen by the compiler;
// Manual axes are mapped by shard_map. The default here is Explicit, as for
// jax.make_mesh.
//
// Text form (round-trips through ParseMesh): "mesh[fsdp=2,model=4]"; a
// non-Explicit axis carries its type: "mesh[x=2,y=2:Auto]".
//
// Validation policy: Mesh::Create checks everything (non-empty unique names
// that are identifiers, sizes >= 1, product fits int64); the private
// constructor is only reached through it, so a Mesh value is always valid.
// Thread-safety: immutable value type, safe to share.
#ifndef MESHSERVE_COMMON_SHARDING_MESH_H_
#define MESHSERVE_COMMON_SHARDING_MESH_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace meshserve {

enum class AxisType { kExplicit, kAuto, kManual };

// "Explicit", "Auto", "Manual".
absl::string_view AxisTypeName(AxisType type);
// \error kInvalidArgument naming `text`.
absl::StatusOr<AxisType> ParseAxisType(absl::string_view text);

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  AxisType type = AxisType::kExplicit;

  friend bool operator==(const MeshAxis& a, const MeshAxis& b) {
    return a.name == b.name && a.size == b.size && a.type == b.type;
  }
  template <typename H>
  friend H AbslHashValue(H h, const MeshAxis& a) {
    return H::combine(std::move(h), a.name, a.size, a.type);
  }
};

class Mesh {
 public:
  // An empty mesh (no axes, one device): JAX's "no mesh" context.
  Mesh() = default;

  // \error kInvalidArgument: duplicate or empty axis name, size < 1, device
  //   count overflowing int64; the message names the offending axis.
  static absl::StatusOr<Mesh> Create(std::vector<MeshAxis> axes);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int num_axes() const { return static_cast<int>(axes_.size()); }
  bool empty() const { return axes_.empty(); }
  int64_t num_devices() const { return num_devices_; }
  const MeshAxis& axis(int i) const { return axes_[i]; }
  // Index of the axis named `name`, or nullopt.
  std::optional<int> AxisIndex(absl::string_view name) const;
  // True when at least one axis is Explicit (the rules only run then).
  bool HasExplicitAxes() const;

  // Coordinates (one per axis) of `device`, row-major.
  // \error kOutOfRange when device is not in [0, num_devices).
  absl::StatusOr<std::vector<int64_t>> CoordsOfDevice(int64_t device) const;
  // Unchecked twin; precondition (DCHECK) 0 <= device < num_devices.
  std::vector<int64_t> UncheckedCoordsOfDevice(int64_t device) const;
  // The device at `coords`.
  // \error kOutOfRange when the rank or any coordinate is out of range.
  absl::StatusOr<int64_t> DeviceAtCoords(absl::Span<const int64_t> coords) const;

  // Same axes with the listed axes set to `type` (unknown names ignored).
  Mesh WithAxisTypes(absl::Span<const std::string> names, AxisType type) const;

  std::string ToString() const;  // "mesh[fsdp=2,model=4]"

  friend bool operator==(const Mesh& a, const Mesh& b) { return a.axes_ == b.axes_; }
  friend bool operator!=(const Mesh& a, const Mesh& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Mesh& m) {
    return H::combine(std::move(h), m.axes_);
  }
  friend std::ostream& operator<<(std::ostream& os, const Mesh& m) {
    return os << m.ToString();
  }

 private:
  explicit Mesh(std::vector<MeshAxis> axes, int64_t num_devices)
      : axes_(std::move(axes)), num_devices_(num_devices) {}

  std::vector<MeshAxis> axes_;
  int64_t num_devices_ = 1;
};

// Parses "mesh[a=2,b=4:Auto]" (spaces allowed; "mesh" prefix optional).
// \error kInvalidArgument naming the text and the bad part.
absl::StatusOr<Mesh> ParseMesh(absl::string_view text);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_MESH_H_
