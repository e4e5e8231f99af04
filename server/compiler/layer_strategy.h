// Per-layer strategies of the compiler (compiler.h). Each takes the layer's
// operands as laid out now (their typed layouts) and returns the result laid
// out exactly as its typed sharding (unreduced axes included), emitting the
// steps through the ProgramEmitter.
//
//   dot (linear, einsum; either may add a bias to the last dim): enumerate compute layouts. Each mesh axis (of size
//     > 1) either shards one einsum label (a batch/free dim of the result, or
//     the contracting dim: the local product is then a partial sum over that
//     axis) or is unused. cost = network bytes to bring lhs and rhs into that
//     layout + bytes to bring the (partial) result into its typed sharding
//     (the planner's reduce-scatter/all-reduce for contracting axes) + a
//     fixed 128 KiB per reshard that crosses the network (an exchange the
//     workers wait for: a small kernel gathered beats two exchanges); ties
//     broken by the busiest device's GEMM flops, then by device-level bytes.
//   elementwise (add, mul): operands laid out as the result (broadcast dims
//     unsharded), computed locally.
//   unary (relu, gelu, silu, tanh): computed in the result's layout.
//   norm / softmax: computed in the result's layout with the normalised axis
//     gathered, then laid out as the result (softmax's where mask laid out as
//     the input, broadcast dims unsharded; causal from global indices).
//   positions: each device writes the global indices of its result box.
//   rope: in the result's layout (global positions from the box).
//   reshape: local when every device's operand box is, element for element,
//     its result box; else gathered, reshaped, sliced.
//   transpose: local, then laid out as the result.
//   embed: ids laid out as the result's leading dims, the table's vocabulary
//     kept sharded (partial sums, reduced by the planner).
//   reshard: one plan.
#ifndef MESHSERVE_SERVER_COMPILER_LAYER_STRATEGY_H_
#define MESHSERVE_SERVER_COMPILER_LAYER_STRATEGY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/named_sharding.h"
#include "server/compiler/compiler.h"
#include "server/compiler/program_emitter.h"

namespace meshserve {

struct LayerContext {
  ProgramEmitter* emitter = nullptr;
  const LayerDef* layer = nullptr;
  ArrayType result;  // the typed result
  // The layer's inputs in order, then its params in the order kernel, table,
  // scale, bias (those the op has), then softmax's where.
  std::vector<Placed> operands;
  std::vector<std::string> operand_names;
  LayerPlanInfo* info = nullptr;
  // attention: its index among the model's attention layers, and their
  // number (the layers of the workers' KV cache).
  int64_t cache_layer = 0;
  int64_t num_cache_layers = 0;
};

// The result value laid out as ctx.result's sharding.
absl::StatusOr<Placed> CompileDotLayer(const LayerContext& ctx);
absl::StatusOr<Placed> CompileLocalLayer(const LayerContext& ctx);

// An einsum between two operands, in labels (exposed for tests).
struct DotSpecLabels {
  std::string lhs, rhs, out;
};
// \error kInvalidArgument for a malformed equation; kUnimplemented for labels
//   summed away in one operand.
absl::StatusOr<DotSpecLabels> ParseEinsumLabels(absl::string_view equation);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_LAYER_STRATEGY_H_
