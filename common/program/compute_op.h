// The one table of compute ops of a program's ComputeStep
// (proto/program.proto): the wire name and the number of inputs of each op, in
// the spirit of XLA's HLO_OPCODE_LIST. Everything about an op that the
// compiler (server/compiler), the worker (server/worker) and the one step
// executor (compute_step.h, which holds each op's semantics) need is generated
// from MS_COMPUTE_OP_LIST; adding an op is one line here plus its kernel in
// compute_step.cc (a switch without default, so the compiler warns when one is
// missing).
//
// The IR holds a ComputeOp; the wire holds its name. ParseComputeOp runs at
// the proto edge (program_proto.cc), so a peer's unknown op string is rejected
// there with kInvalidArgument naming it.
//
// Thread-safety: pure functions over constants.
#ifndef MESHSERVE_COMMON_PROGRAM_COMPUTE_OP_H_
#define MESHSERVE_COMMON_PROGRAM_COMPUTE_OP_H_

#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// V(enumerator, wire name, number of inputs)
#define MS_COMPUTE_OP_LIST(V)           \
  V(kDotGeneral, "dot_general", 2)      \
  V(kAdd, "add", 2)                     \
  V(kMul, "mul", 2)                     \
  V(kSilu, "silu", 1)                   \
  V(kRelu, "relu", 1)                   \
  V(kGelu, "gelu", 1)                   \
  V(kTanh, "tanh", 1)                   \
  V(kRmsNorm, "rms_norm", 2)            \
  V(kLayerNorm, "layer_norm", 3)        \
  V(kSoftmax, "softmax", 1)             \
  V(kReshape, "reshape", 1)             \
  V(kTranspose, "transpose", 1)         \
  V(kEmbed, "embed", 2)                 \
  V(kCopy, "copy", 1)                   \
  V(kZeros, "zeros", 0)                 \
  V(kPositions, "positions", 0)         \
  V(kRope, "rope", 1)                   \
  V(kSoftmaxWhere, "softmax_where", 2)  \
  V(kAttention, "attention", 3)         \
  V(kSelectRows, "select_rows", 1)      \
  V(kSample, "sample", 1)

enum class ComputeOp {
#define MS_COMPUTE_OP_ENUM(enumerator, name, arity) enumerator,
  MS_COMPUTE_OP_LIST(MS_COMPUTE_OP_ENUM)
#undef MS_COMPUTE_OP_ENUM
};

// The wire name, e.g. "dot_general".
absl::string_view ComputeOpName(ComputeOp op);
// \error kInvalidArgument "unknown compute op '<name>'".
absl::StatusOr<ComputeOp> ParseComputeOp(absl::string_view name);
// The number of inputs the op takes.
int ComputeOpArity(ComputeOp op);

inline std::ostream& operator<<(std::ostream& os, ComputeOp op) {
  return os << ComputeOpName(op);
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_COMPUTE_OP_H_
