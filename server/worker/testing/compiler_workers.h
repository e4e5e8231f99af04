// Runs compiled programs (common/program/program_ir.h) on the worker's
// in-process cluster (server/worker/testing/in_process_workers.h: real
// WorkerEngines connected by an InMemoryTransport), for end-to-end tests of the
// compiler. The workers load the model themselves (params initialised from the
// model's seed).
//
// The program IR only (no protobuf). `load.devices` is ignored (each worker
// gets its devices of load.device_workers).
//
// Thread-safety: pure function.
#ifndef MESHSERVE_SERVER_WORKER_TESTING_COMPILER_WORKERS_H_
#define MESHSERVE_SERVER_WORKER_TESTING_COMPILER_WORKERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/program/program_ir.h"

namespace meshserve {

// Loads the model on `num_workers` workers, installs `programs`, runs one
// request with `inputs` (each routed to the worker of its device) and
// returns every worker's output slices.
absl::StatusOr<std::vector<SliceIr>> RunOnInProcessWorkers(
    int num_workers, const LoadModelIr& load, const std::map<int64_t, ProgramIr>& programs,
    const std::vector<SliceIr>& inputs);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_TESTING_COMPILER_WORKERS_H_
