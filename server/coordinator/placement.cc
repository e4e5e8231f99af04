#include "server/coordinator/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/typed_model.h"

namespace meshserve {
namespace {

// The model's mesh for n devices, if the model types on it.
absl::StatusOr<Mesh> MeshThatTypes(const ModelFile& model, int64_t n) {
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(model, n));
  MS_RETURN_IF_ERROR(CheckModelTypesOn(model, mesh), "model '", model.name, "' on ",
                     mesh.ToString());
  return mesh;
}

}  // namespace

std::vector<int64_t> Placement::WorkerIds() const {
  std::vector<int64_t> ids;
  for (const auto& [id, devices] : devices_by_worker) ids.push_back(id);
  return ids;
}

std::vector<int64_t> Placement::ReplicaDevices(int64_t worker_id) const {
  auto it = replica_devices_by_worker.find(worker_id);
  return it == replica_devices_by_worker.end() ? std::vector<int64_t>{} : it->second;
}

bool Placement::SameLayoutAs(const Placement& other) const {
  return mesh == other.mesh && device_workers == other.device_workers &&
         worker_addresses == other.worker_addresses &&
         replica_devices_by_worker == other.replica_devices_by_worker;
}

std::string Placement::ToString() const {
  auto range = [](const std::vector<int64_t>& devices) {
    return devices.size() == 1 ? absl::StrCat(devices.front())
                               : absl::StrCat(devices.front(), "-", devices.back());
  };
  std::vector<std::string> parts;
  for (const auto& [id, devices] : devices_by_worker) {
    parts.push_back(absl::StrCat(id, ": devices ", range(devices)));
  }
  std::string out = absl::StrCat("gen ", generation, " v", version, " ", mesh.ToString(),
                                 " workers {", absl::StrJoin(parts, ", "), "}");
  if (replica_devices_by_worker.empty()) return out;
  parts.clear();
  for (const auto& [id, devices] : replica_devices_by_worker) {
    parts.push_back(absl::StrCat(id, ": ", range(devices)));
  }
  return absl::StrCat(out, " replicas {", absl::StrJoin(parts, ", "), "}");
}

absl::StatusOr<Placement> ComputePlacement(const ModelFile& model,
                                           const std::vector<PlacementWorker>& workers,
                                           int64_t generation, int replicas) {
  if (replicas != 0 && replicas != 1) {
    return InvalidArgument("replicas must be 0 or 1, got ", replicas);
  }
  if (workers.empty()) {
    return FailedPrecondition("model '", model.name, "': no live workers to place on");
  }
  absl::StatusOr<Mesh> mesh = absl::InvalidArgumentError("unset");
  absl::Status first_error;
  for (int64_t n = static_cast<int64_t>(workers.size()); n >= 1; --n) {
    mesh = MeshThatTypes(model, n);
    if (mesh.ok()) break;
    if (first_error.ok()) first_error = mesh.status();
  }
  if (!mesh.ok()) {
    return AnnotateStatus(first_error, "model '", model.name, "': placing on ",
                          workers.size(), " workers");
  }
  Placement placement;
  placement.model = model.name;
  placement.generation = generation;
  placement.mesh = *std::move(mesh);
  const int64_t num_devices = placement.mesh.num_devices();
  const int64_t num_used =
      std::min<int64_t>(static_cast<int64_t>(workers.size()), num_devices);
  placement.device_workers.resize(num_devices);
  for (int64_t d = 0; d < num_devices; ++d) {
    const PlacementWorker& w = workers[d * num_used / num_devices];
    placement.device_workers[d] = w.worker_id;
    placement.devices_by_worker[w.worker_id].push_back(d);
    placement.worker_addresses[w.worker_id] = w.address;
  }
  const std::vector<int64_t> ids = placement.WorkerIds();
  if (replicas == 1 && ids.size() >= 2) {
    for (size_t i = 0; i < ids.size(); ++i) {
      placement.replica_devices_by_worker[ids[i]] =
          placement.devices_by_worker.at(ids[(i + 1) % ids.size()]);
    }
  }
  return placement;
}

std::string DeviceCoordsString(const Mesh& mesh, int64_t device) {
  absl::StatusOr<std::vector<int64_t>> coords = mesh.CoordsOfDevice(device);
  if (!coords.ok()) return "";
  std::vector<std::string> parts;
  for (int i = 0; i < mesh.num_axes(); ++i) {
    parts.push_back(absl::StrCat(mesh.axis(i).name, "=", (*coords)[i]));
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace meshserve
