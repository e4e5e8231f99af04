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
// Thread-safety: pure function.
#ifndef MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_
#define MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_

#include <cstdint>
#include <map>
#include <string>

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

// `inputs` and `params`: full (unsharded) tensors by name; each device gets
// its boxes (inputs: the compiled input slices; params: the typed sharding).
// Returns every output, assembled.
absl::StatusOr<std::map<std::string, Tensor>> RunCompiledPlan(
    const CompiledPlan& compiled, const TypedModel& typed,
    const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& params,
    InterpreterStats* stats = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_TESTING_REFERENCE_INTERPRETER_H_
