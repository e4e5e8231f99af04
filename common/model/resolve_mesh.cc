// ResolveMesh: the model's mesh for the devices available (model_file.h).
// Kept apart from model_file.cc so that parsing links without the mesh code.
#include <string>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/model_file.h"

namespace meshserve {

absl::StatusOr<Mesh> ResolveMesh(const ModelFile& model, int64_t num_devices_available) {
  int64_t fixed = 1;
  int auto_index = -1;
  for (size_t i = 0; i < model.mesh_axes.size(); ++i) {
    if (model.mesh_axes[i].second == -1) {
      auto_index = static_cast<int>(i);
    } else {
      fixed *= model.mesh_axes[i].second;
    }
  }
  std::vector<MeshAxis> axes;
  for (size_t i = 0; i < model.mesh_axes.size(); ++i) {
    MeshAxis axis;
    axis.name = model.mesh_axes[i].first;
    axis.size = model.mesh_axes[i].second;
    if (static_cast<int>(i) == auto_index) {
      if (num_devices_available < 1 || num_devices_available % fixed != 0) {
        return InvalidArgument("model '", model.name, "': mesh axis '", axis.name,
                               "' is -1 but the other axes (", fixed,
                               " devices) do not divide the ", num_devices_available,
                               " devices available");
      }
      axis.size = num_devices_available / fixed;
      if (axis.size < 1) axis.size = 1;
    }
    axes.push_back(std::move(axis));
  }
  MS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(std::move(axes)), "model '", model.name, "'");
  return mesh;
}

}  // namespace meshserve
