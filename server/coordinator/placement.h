// Placement: which worker hosts each device of a model's mesh.
//
// The mesh is ResolveMesh(model, n) for the largest n <= num workers that
// resolves (an axis given as -1 takes the rest; with a fixed mesh n does not
// matter). With W = min(num workers, num devices) workers used, devices are
// dealt in contiguous blocks in worker-id order:
//     worker index of device d = floor(d * W / D)
// e.g. mesh[data=8] on workers {0,1}: devices 0-3 on worker 0, 4-7 on worker 1.
// Contiguous blocks keep the minor mesh axis (usually 'model', the one with
// the most traffic) inside a worker when D/W is a multiple of its size.
//
// Replicas: with replicas = 1 and W >= 2, the i-th used worker (ascending id)
// also holds the param boxes of the devices of worker (i + 1) % W, so every
// box lives on two workers (programs never read the replica). A parameter
// version (1 at load) is part of a placement: a push makes a new Placement
// with the same generation and version + 1.
//
// Thread-safety: plain values and pure functions.
#ifndef MESHSERVE_SERVER_COORDINATOR_PLACEMENT_H_
#define MESHSERVE_SERVER_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"
#include "server/compiler/model_compiler.h"

namespace meshserve {

struct PlacementWorker {
  int64_t worker_id = -1;
  std::string address;
};

struct Placement {
  std::string model;
  int64_t generation = 0;
  Mesh mesh;
  std::vector<int64_t> device_workers;                 // worker id per device
  std::map<int64_t, std::string> worker_addresses;     // used workers only
  std::map<int64_t, std::vector<int64_t>> devices_by_worker;
  int64_t version = 1;  // parameter version these workers hold
  // Devices of other workers whose param boxes a worker also holds (only
  // workers that hold replicas appear).
  std::map<int64_t, std::vector<int64_t>> replica_devices_by_worker;

  std::vector<int64_t> WorkerIds() const;
  // replica_devices_by_worker[worker_id], or empty.
  std::vector<int64_t> ReplicaDevices(int64_t worker_id) const;
  // The compiler's view: mesh, device -> worker, generation.
  DeviceAssignment Devices() const { return {mesh, device_workers, generation}; }
  // Same mesh, same device -> worker map, replicas and addresses (generation
  // and version ignored).
  bool SameLayoutAs(const Placement& other) const;
  // "gen 3 v1 mesh[data=8] workers {0: devices 0-3, 1: devices 4-7}" (plus
  // " replicas {0: 4-7, 1: 0-3}" with replicas)
  std::string ToString() const;
};

// The mesh uses the most workers (at most workers.size(), one device each for
// a -1 axis) on which the model types: a -1 axis that would not divide a
// sharded parameter (3 workers, a [32, 32] kernel sharded over it) falls back
// to fewer workers, leaving some idle, rather than a mesh that cannot serve.
// `replicas` (0 or 1) as in the file comment.
// \error kFailedPrecondition when `workers` is empty; kInvalidArgument (the
//   error for workers.size()) when no worker count resolves and types, or for
//   replicas outside {0, 1}.
absl::StatusOr<Placement> ComputePlacement(const ModelFile& model,
                                           const std::vector<PlacementWorker>& workers,
                                           int64_t generation, int replicas = 0);

// "fsdp=0,model=1" for `device` of `mesh` (empty for an out-of-range device).
std::string DeviceCoordsString(const Mesh& mesh, int64_t device);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PLACEMENT_H_
