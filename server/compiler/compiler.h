// The compiler: a typed model (common/model/typed_model.h) + a placement ->
// one program per worker (the program IR of common/program/program_ir.h,
// shared with the worker; serialized as proto/program.proto's meshserve.Program
// by common/program/program_proto.h), the input slicing
// and the output gathering of a request, and a per-layer description.
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
// Buffers (per device): "param/<name>" (resident), "in/<input>" (filled from
// the request with the boxes of `input_slices`), "t<n>/<value>" temporaries,
// freed as soon as no later step reads them. Tags are "<program_id>/<n>",
// unique per program. All workers' step lists follow one global topological
// order (the order of emission), so sends (non-blocking) and receives
// (blocking) cannot deadlock.
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_SERVER_COMPILER_COMPILER_H_
#define MESHSERVE_SERVER_COMPILER_COMPILER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/typed_model.h"
#include "common/program/program_ir.h"
#include "server/compiler/compiled_plan.h"

namespace meshserve {

// One layout change of one layer: which value, why, and what it costs.
struct CollectiveInfo {
  std::string value;    // the value moved ("x", "gate_proj.kernel", "y (partial)")
  std::string purpose;  // "lhs", "rhs", "operand", "result", "output", ...
  std::string pattern;  // the planner's pattern ("all-gather", "reduce-scatter", ...)
  std::string from;     // source spec, e.g. P('fsdp', None, None)
  std::string to;       // destination spec
  int64_t bytes = 0;    // network bytes per request
};

struct LayerPlanInfo {
  std::string layer;
  std::string op;
  std::string type;      // the typed result, "float32[8@fsdp,16,64@model]"
  std::string strategy;  // e.g. "dot: fsdp->d(contract) model->f"
  std::vector<CollectiveInfo> collectives;  // network and local ones
  int64_t bytes_moved = 0;                  // sum over collectives
  int64_t max_device_flops = 0;             // GEMM work of the busiest device
};

struct CompiledModel {
  std::map<int64_t, ProgramIr> programs;  // by worker id; SerializeProgram -> bytes
  std::vector<InputSlice> input_slices;
  std::vector<OutputPiece> output_pieces;
  std::vector<LayerPlanInfo> layers;  // in model order (+ one "outputs" entry if needed)
  int64_t bytes_moved = 0;            // per request, all layers
  std::string ToString() const;       // the per-layer description
};

struct CompileOptions {
  std::string program_id;
  int64_t generation = 0;
};

// `device_workers[d]` is the worker hosting mesh device d of typed.mesh.
// \error kInvalidArgument: device_workers of the wrong length or negative;
//   kUnimplemented for a layer form no strategy handles (message names it).
absl::StatusOr<CompiledModel> CompileModel(const TypedModel& typed,
                                           const std::vector<int64_t>& device_workers,
                                           const CompileOptions& options);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_COMPILER_H_
