// The one step executor: runs one compute step (ComputeStepIr, program.proto's
// ComputeStep) on local boxes through the tensor kernels
// (common/tensor/kernels.h), dispatching on the op table (compute_op.h). The
// worker (server/worker/program_run.cc) and the compiler's reference
// interpreter (server/compiler/testing) both call it, so they compute the same
// numbers. Pure: the caller resolves the input buffers and stores the result.
//
// Semantics per op, on the *local* tensors (each input's tensor is its box's
// elements; dims below are local dims):
//   dot_general  inputs (lhs, rhs); jax.lax.dot_general with the step's
//                lhs/rhs contracting and batch dims.
//   add, mul     inputs (a, b); numpy broadcasting of the local tensors.
//   relu, gelu (tanh approximation), silu, tanh   input (x).
//   rms_norm     inputs (x, scale); layer_norm inputs (x, scale, bias); over
//                the last dim with `epsilon`.
//   softmax      input (x); over `softmax_axis` (default -1); x times `scale` (0:
//                1) first; `causal` masks global k > q over the last two dims
//                (global index = out_box begin + local index).
//   softmax_where  inputs (x, where): softmax as above with where's zeros
//                masked (where broadcast to x's local box, numpy rules).
//   positions    no input; int32 out_box whose element is its global index
//                along `positions_axis`.
//   rope         input (x); rotary embedding over the last dim with the
//                global index along `rope_seq_axis` as the position, `theta`.
//   reshape      input (x); the result has out_box's shape (same element count).
//   transpose    input (x); out dim i = in dim perm[i].
//   embed        inputs (ids, table); table is a box of [vocab, features]; ids
//                outside the table box's vocab interval give zero rows; with
//                vocab_size > 0 an id outside [0, vocab_size) is an error.
//   copy         input (x); the elements of out_box (which must lie inside x's
//                box), converted to the output dtype.
//   zeros        no input; a zero-filled out_box.
// The output dtype is out_dtype; DTYPE_INVALID means the first input's dtype
// (float32 for zeros). `partial` results are float32 whatever out_dtype says.
// The result must have out_box's shape (reshape: the same element count).
//
// \error kInvalidArgument naming the op and the values: a number of inputs
//   other than ComputeOpArity, bad out_box/out_dtype, kernel shape errors, a
//   result whose shape is not out_box's; kOutOfRange for copy's out_box
//   outside x.
//
// Thread-safety: pure function (DotGeneral uses OpenBLAS threads).
#ifndef MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_
#define MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/program/program_ir.h"
#include "common/tensor/tensor.h"

namespace meshserve {

absl::StatusOr<BoxTensor> RunComputeStep(const ComputeStepIr& step,
                                         absl::Span<const BoxTensor* const> inputs);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_
