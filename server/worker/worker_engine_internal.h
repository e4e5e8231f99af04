// Internals of WorkerEngine shared by its .cc files (they include the core
// tensor types, which worker_engine.h keeps out of its API).
#ifndef MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_
#define MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/program/program_ir.h"
#include "common/sharding/mesh.h"
#include "common/tensor/tensor.h"
#include "server/worker/peer_transport.h"
#include "server/worker/rendezvous.h"

namespace meshserve {

// One (model, generation) resident on this worker. Immutable once built.
struct LoadedModel {
  std::string model;
  int64_t generation = 0;
  Mesh mesh;
  std::vector<int64_t> devices;         // hosted here, ascending
  std::vector<int64_t> device_workers;  // worker id of every mesh device
  int64_t worker_id = -1;               // the worker of `devices`
  // device -> param name -> its box. Devices holding an identical box share
  // the pointer.
  absl::flat_hash_map<int64_t,
                      absl::flat_hash_map<std::string, std::shared_ptr<const BoxTensor>>>
      params;
  int64_t param_bytes = 0;  // distinct buffers only

  bool HostsDevice(int64_t device) const { return params.contains(device); }
  std::string DevicesString() const;  // "[0, 1]"
};

// Parses, validates and loads (see WorkerEngine::LoadModel). `worker_id` is
// this worker's id or -1 when not known yet.
absl::StatusOr<std::shared_ptr<const LoadedModel>> BuildLoadedModel(
    const LoadModelIr& request, int64_t worker_id);

// Structural checks of a program (see WorkerEngine::InstallProgram).
absl::Status ValidateProgram(const ProgramIr& program);

struct RunContext {
  Rendezvous* rendezvous = nullptr;
  PeerTransport* transport = nullptr;  // may be null
  int64_t worker_id = -1;
};

// Runs the steps of `program` for one request (the request must have been
// started on the rendezvous). Returns the output slices.
absl::StatusOr<std::vector<SliceIr>> RunProgram(const ProgramIr& program,
                                                const LoadedModel& model,
                                                absl::string_view request_id,
                                                std::vector<SliceIr> inputs,
                                                absl::Time deadline,
                                                const RunContext& context);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_
