// What compiling a (model, input shapes, out_shardings, generation) produces,
// and what the coordinator runtime keeps and runs: one program per worker (the
// program IR of common/program/program_ir.h, the one program type from the
// compiler to WorkerClient::InstallProgram), which box of each input each
// (worker, device) receives, which (worker, device) returns which box of each
// output, the outputs' types, and a per-layer description with its costs.
// Built by the compiler (compiler.h, CompileModel) and handed unchanged to the
// runtime (model_compiler.h, ModelCompiler::Compile). Nothing here is
// serialized; only the gRPC worker client turns a program into bytes.
//
// Thread-safety: plain values.
#ifndef MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_
#define MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/model/model_op.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// Device `device` (on `worker`) receives `box` of input `input` as buffer
// InputBuffer(input) ("in/<input>").
struct InputSlice {
  std::string input;
  int64_t worker = -1;
  int64_t device = -1;
  Box box;
};

// Device `device` (on `worker`) returns `box` of output `output`. The pieces of
// one output tile it exactly once (one replica per box).
struct OutputPiece {
  std::string output;
  int64_t worker = -1;
  int64_t device = -1;
  Box box;
};

struct PlanOutput {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string type_str;  // JAX type string, e.g. float32[8@data,32]
  PartitionSpec spec;
};

// One layout change of one layer: which value, why, and what it costs.
struct CollectiveInfo {
  std::string value;    // the value moved ("x", "gate_proj.kernel", "y (partial)")
  std::string purpose;  // "lhs", "rhs", "operand", "result", "output", ...
  std::string pattern;  // the planner's pattern ("all-gather", "reduce-scatter", ...)
  std::string from;     // source spec, e.g. P('fsdp', None, None)
  std::string to;       // destination spec
  int64_t bytes = 0;    // network bytes per request
  // Rounds of peer messages the workers wait for: 0 (local only), 1 (direct),
  // 2 (two-phase all-reduce); the planner's ReshardPlan::num_rounds.
  int64_t rounds = 0;
};

struct LayerPlanInfo {
  std::string layer;  // the layer's name, or "(outputs)" for the outputs' gather
  std::optional<ModelOp> op;  // the layer's op; nullopt: the outputs' gather
  std::string type;      // the typed result, "float32[8@fsdp,16,64@model]"
  std::string strategy;  // e.g. "dot: fsdp->d(contract) model->f"
  std::vector<CollectiveInfo> collectives;  // network and local ones
  int64_t bytes_moved = 0;                  // sum over collectives
  int64_t max_device_flops = 0;             // GEMM work of the busiest device

  // ModelOpName(*op), or "gather" for the outputs' entry.
  absl::string_view OpName() const { return op.has_value() ? ModelOpName(*op) : "gather"; }
};

struct CompiledPlan {
  std::string program_id;
  int64_t generation = 0;
  std::map<int64_t, ProgramIr> programs;  // by worker id
  std::vector<InputSlice> input_slices;
  std::vector<OutputPiece> output_pieces;
  std::vector<PlanOutput> outputs;    // in the model's output order
  std::vector<LayerPlanInfo> layers;  // in model order (+ one "outputs" entry if needed)
  int64_t bytes_moved = 0;            // per request, all layers
  // The most bytes any one worker keeps for a ParamCacheMode::kFill run: its
  // param-only buffers read by steps that are not (MarkParamOnlySteps).
  int64_t kept_param_bytes = 0;
  std::string ToString() const;       // the per-layer description
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_
