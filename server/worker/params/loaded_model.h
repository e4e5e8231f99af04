// One (model, generation, version) resident on a worker: its mesh, the
// devices it hosts and holds, and the held cells of each param. The value
// type of the model store (model_store.h), the push staging (param_store.h)
// and the runs (program_run.h).
//
// Held cells: per param the distinct boxes of `devices` and `replica_devices`
// (the boxes of one NamedSharding are identical or disjoint), ascending by
// box; `params` points each hosted device's param boxes into them, so devices
// holding an identical box share one buffer, and versions share the buffers
// of params they did not change.
//
// Thread-safety: immutable once built (kept_params is thread-safe).
#ifndef MESHSERVE_SERVER_WORKER_PARAMS_LOADED_MODEL_H_
#define MESHSERVE_SERVER_WORKER_PARAMS_LOADED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "common/tensor/tensor.h"
#include "server/worker/params/param_cache.h"

namespace meshserve {

// The held cells of one param.
struct HeldParam {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<std::shared_ptr<const BoxTensor>> cells;

  // The index of the cell that contains `box` (same rank), or -1.
  int CellContaining(const Box& box) const;
  std::string CellsString() const;  // "[0:4, 0:6], [4:8, 0:6]"
};

struct LoadedModel {
  std::string model;
  int64_t generation = 0;
  int64_t version = 1;
  Mesh mesh;
  std::vector<int64_t> devices;          // hosted here, ascending
  std::vector<int64_t> replica_devices;  // held for durability only, ascending
  std::vector<int64_t> device_workers;   // worker id of every mesh device
  int64_t worker_id = -1;                // this worker
  // device (of `devices`) -> param name -> its box, pointing into `held`.
  // Devices holding an identical box share the pointer.
  absl::flat_hash_map<int64_t,
                      absl::flat_hash_map<std::string, std::shared_ptr<const BoxTensor>>>
      params;
  absl::flat_hash_map<std::string, HeldParam> held;
  int64_t param_bytes = 0;  // distinct held buffers only
  // What kFill runs of this version kept, by program (param_cache.h).
  KeptParamBuffers kept_params;

  bool HostsDevice(int64_t device) const { return params.contains(device); }
  std::string DevicesString() const;  // "[0, 1]"
  std::string Name() const;           // "model 'm' generation 1 version 2"
};

// The bytes of the distinct buffers of model.held.
int64_t DistinctHeldBytes(const LoadedModel& model);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PARAMS_LOADED_MODEL_H_
