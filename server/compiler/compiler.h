// The compiler: a typed model (common/model/typed_model.h) + a placement ->
// a CompiledPlan (compiled_plan.h): one program per worker (the program IR of
// common/program/program_ir.h, shared with the worker; only the gRPC worker
// client serializes it), the input slicing and the output gathering of a
// request, and a per-layer description.
//
// Semantics are JAX's: every value's type (sharding) is fixed by TypeModel.
// Execution is free, as for XLA's SPMD partitioner: per layer the compiler
// picks the cheapest local strategy that produces the typed result (see
// strategy.h and docs/compiler.md):
//   cost = bytes moved over the network (reshard plans, worker granularity),
//   then the max per-device GEMM flops, then bytes moved between devices.
// Every change of layout is a plan of the resharding planner
// (common/sharding/reshard_plan.h); its transfers become Send/Recv steps
// (different workers) or Copy steps (same worker).
//
// Buffers (per device): ParamBuffer(name) (resident), InputBuffer(input)
// (filled from the request with the boxes of `input_slices`; both named in
// program_ir.h), "t<n>/<value>" temporaries, freed as soon as no later step
// reads them. Tags are "<program_id>/<n>", unique per program. All workers' step lists follow one global topological
// order (the order of emission), so sends (non-blocking) and receives
// (blocking) cannot deadlock.
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_SERVER_COMPILER_COMPILER_H_
#define MESHSERVE_SERVER_COMPILER_COMPILER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/typed_model.h"
#include "common/sharding/reshard_plan.h"
#include "server/compiler/compiled_plan.h"

namespace meshserve {

struct CompileOptions {
  std::string program_id;
  int64_t generation = 0;
  // The resharding planner's options for every layout change (the collective
  // cost model that picks e.g. the two-phase all-reduce; suggest fills it from
  // its CostFigures so one source prices both).
  ReshardOptions reshard;
};

// `device_workers[d]` is the worker hosting mesh device d of typed.mesh.
// \error kInvalidArgument: device_workers of the wrong length or negative;
//   kUnimplemented for a layer form no strategy handles (message names it).
// The plan's program_id and generation are the options'; its outputs are the
// typed model's.
absl::StatusOr<CompiledPlan> CompileModel(const TypedModel& typed,
                                          const std::vector<int64_t>& device_workers,
                                          const CompileOptions& options);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_COMPILER_H_
