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
//   attention    inputs (q, k, v): causal grouped-query attention scaled by
//                attention_scale (decode_kernels.h CausalAttention); in a
//                generation step, over the device's KV cache (layer
//                cache_layer of num_cache_layers; CachedStepAttention).
//   select_rows  input (x [B, T, D]): out_box's R rows (the step's sampled
//                rows; outside one, the last R).
//   sample       input (logits [B, R, V]): float32 [B, R, 42] records of the
//                sampled tokens (decode_kernels.h SampleRows), with
//                vocab_size the real vocabulary.
// In a generation step (`decode` set), positions and rope read the step's
// positions along their axis (the token slots) instead of the global index.
// The output dtype is out_dtype; unset (nullopt) means the first input's dtype
// (float32 for zeros). `partial` results are float32 whatever out_dtype says.
// The result must have out_box's shape (reshape: the same element count).
//
// \error kInvalidArgument naming the op and the values: a number of inputs
//   other than ComputeOpArity, a bad out_box, kernel shape errors, a
//   result whose shape is not out_box's; kOutOfRange for copy's out_box
//   outside x.
// ParamSliceOf / rhs_in_place: the worker (server/worker/program_run.cc)
// does not copy a param's slice that only a dot_general's rhs reads.
//
// Thread-safety: pure function (DotGeneral uses OpenBLAS threads).
#ifndef MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_
#define MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_

#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kvcache/kv_cache.h"
#include "common/program/decode_step.h"
#include "common/program/program_ir.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// What the steps of a generation step read besides their inputs.
struct DecodeState {
  const DecodeLayout* layout = nullptr;
  std::vector<int64_t> positions;  // SlotPositions(*layout)
  // The KV cache of `device` for a model with num_layers attention layers of
  // kv_heads heads of head_dim here (made by the first attention step).
  std::function<absl::StatusOr<KvCache*>(int64_t device, int64_t num_layers, int64_t kv_heads,
                                         int64_t head_dim)>
      cache;
};

// A copy step's destination not made but read in place (ParamSliceOf): the
// sub-box `box` of `param`, a resident float32 rank-2 param's tensor. Valid
// while the param lives.
struct ParamSlice {
  const BoxTensor* param = nullptr;
  Box box;
};

// Whether `copy`, whose source buffer holds `src`, only takes a box of a
// resident param whole onto the same device, unchanged: src "param/..." of
// float32 rank 2, src_device == dst_device, no accumulate, dtype unset or
// float32, box == dst_box, inside src's box. The slice when so, else nullopt
// (the copy must run). E.g. the LM head's slice of a replicated table
// (server/compiler/decode_model.h): rows [a, b) or columns [a, b) of [V, d].
// The conditions on `copy` alone are ParamSliceBoxOf's (ir_conv.h).
std::optional<ParamSlice> ParamSliceOf(const CopyStepIr& copy, const BoxTensor& src);

// The slice's elements in a buffer of their own: what the copy makes.
absl::StatusOr<BoxTensor> CopyParamSlice(const ParamSlice& slice);

// `decode` is null outside a generation step. `rhs_in_place` (optional):
// inputs[1] (which may then be null) is this slice, read in place, without a
// copy, by a dot_general that contracts lhs's last dim and the slice's dim 0
// or 1 with no batch dims (DotGeneralInPlace, common/tensor/dot_general.h);
// any other step copies it first (CopyParamSlice). The numbers are the same.
absl::StatusOr<BoxTensor> RunComputeStep(const ComputeStepIr& step,
                                         absl::Span<const BoxTensor* const> inputs,
                                         const DecodeState* decode = nullptr,
                                         const ParamSlice* rhs_in_place = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_COMPUTE_STEP_H_
