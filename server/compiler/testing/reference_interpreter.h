// An in-process executor of compiled programs (compiler.h), for tests and for
// checking a compilation without workers: every worker's step list runs in
// one thread, round-robin; a worker runs until a Recv whose tag has not been
// sent yet, then the next worker runs. Compute steps run through the one step
// executor the real workers use (common/program/compute_step.h), so the numbers
// are the workers' numbers; this is a reference for the *scheduling*.
//
// It checks what the IR promises: every Recv is eventually satisfied (else
// kInternal "deadlock"), tags are used once, boxes lie in their buffers, and
// the output pieces tile each output exactly once.
//
// It can also run the programs' param_only_steps as a worker's param cache
// does (ParamCacheMode, program_ir.h), to prove a marking (param_only.h) on
// numbers: a kFill run, then kUse runs with other inputs, must return what
// plain runs with those inputs return. The interpreter decides what to keep
// from the marks alone, independently of how they were computed.
//
// Thread-safety: pure function.
#ifndef MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_
#define MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/model/typed_model.h"
#include "common/tensor/tensor.h"
#include "server/compiler/compiled_plan.h"

namespace meshserve {

struct InterpreterStats {
  int64_t network_bytes = 0;  // bytes sent between different workers
  int64_t num_steps = 0;
  int64_t peak_buffers = 0;   // most live buffers at once (all devices)
};

// A run's use of the programs' param_only_steps (the marked steps).
//   kOff:  every step runs; nothing is kept.
//   kFill: every step runs; `kept` is cleared, then receives each buffer
//          that marked steps wrote and an unmarked step reads, as it is at
//          that step's first read; `kept_bytes` their bytes per worker.
//   kUse:  starts from `kept` (the devices' buffers) and skips the marked
//          steps (`skipped_steps` counts them).
// kFill and kUse fail (kInternal) when a buffer is written by marked and
// unmarked steps both (a kUse run would mix two requests' values).
struct ParamCacheRun {
  ParamCacheMode mode = ParamCacheMode::kOff;
  std::map<std::pair<int64_t, std::string>, BoxTensor> kept;  // by (device, name)
  std::map<int64_t, int64_t> kept_bytes;                      // by worker
  int64_t skipped_steps = 0;
};

// `inputs` and `params`: full (unsharded) tensors by name; each device gets
// its boxes (inputs: the compiled input slices; params: the typed sharding).
// Returns every output, assembled. `cache` (optional): see ParamCacheRun.
absl::StatusOr<std::map<std::string, Tensor>> RunCompiledPlan(
    const CompiledPlan& compiled, const TypedModel& typed,
    const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& params,
    InterpreterStats* stats = nullptr, ParamCacheRun* cache = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_
