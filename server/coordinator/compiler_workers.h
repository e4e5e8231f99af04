// Runs compiled programs (compiler_ir.h) on the worker teammate's in-process
// cluster (server/worker/in_process_workers.h: real ShardWorkers connected by
// an InMemoryTransport), for end-to-end tests of the compiler. The workers
// load the model themselves (params initialised from the model's seed).
//
// Plain types only (no core Box/DType, no .pb.h: see compiler_ir.h). Only a
// binary that links ms_worker may call it.
//
// Thread-safety: pure function.
#ifndef MESHSERVE_SERVER_COORDINATOR_COMPILER_WORKERS_H_
#define MESHSERVE_SERVER_COORDINATOR_COMPILER_WORKERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/coordinator/compiler_ir.h"

namespace meshserve {

struct IrSlice {
  std::string name;
  int64_t device = 0;
  IrBox box;
  int dtype = 0;  // tensor.proto DType number
  std::string data;
};

struct IrModelLoad {
  std::string model;
  std::string model_json;
  int64_t generation = 0;
  std::vector<std::pair<std::string, int64_t>> mesh_axes;  // resolved sizes
  std::vector<int64_t> device_workers;
};

// Loads the model on `num_workers` workers, installs `programs`, runs one
// request with `inputs` (each routed to the worker of its device) and
// returns every worker's output slices.
absl::StatusOr<std::vector<IrSlice>> RunOnInProcessWorkers(
    int num_workers, const IrModelLoad& load, const std::map<int64_t, IrProgram>& programs,
    const std::vector<IrSlice>& inputs);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COMPILER_WORKERS_H_
