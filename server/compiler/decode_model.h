// The decode variant of a language model: the model file a generation step
// runs (common/program/decode_step.h), made from the served model file.
//
//   input_ids [1, T]  (T token slots: the step's tokens packed in one row;
//                      the batch axis is unused, so the input and every
//                      out_sharding lose their batch-axis entry on dim 0)
//   ... the model's layers; attention layers read and extend the workers'
//       KV cache, positions and rope take the step's positions ...
//   decode.rows  = select_rows(<the head's input>, rows=R)   [1, R, D]
//   <head>       = the LM head, now over decode.rows         [1, R, V]
//   decode.sample = sample(<head>, vocab_size=V)             [1, R, 42]
// The one output is decode.sample (sampled token, logprob, top logprobs per
// row). Params are the model's (same names), so the variant's programs run on
// the model's placement and param versions.
//
// A model can generate when it has one integer input of rank 2, one output
// made by an LM head (an einsum "bsd,vd->bsv" over a table param, or a
// linear), and its attention as `attention` layers (no causal softmax left:
// an einsum-built attention cannot read a cache).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_COMPILER_DECODE_MODEL_H_
#define MESHSERVE_SERVER_COMPILER_DECODE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"

namespace meshserve {

inline constexpr char kDecodeOutput[] = "decode.sample";

// What generation needs to know of an LM.
struct LmShape {
  std::string input;          // the token ids input
  int64_t vocab_size = 0;     // the head's output dim
  int64_t num_attention_layers = 0;
  int64_t context_length = 0;  // the position table's rows (0: not bounded by one)
};

// \error kFailedPrecondition naming the model and what it lacks (see the
//   file comment).
absl::StatusOr<LmShape> InspectLm(const ModelFile& model);

// `mesh` (optional): the mesh the variant will be typed and compiled on (the
// placement's; the variant is then valid on that mesh only). With it, the LM
// head reads 1/W of its table per device (W = the devices of the mesh axes
// of size > 1) instead of all of it:
//   W divides the vocabulary (Llama's 32000 on 1, 2, 4, 8 devices):
//     <head> out_sharding P(None, None, axes): each device computes the
//     logits of its vocabulary slice from the (replicated) table;
//     sample gathers the rows' logits (R * V * 4 bytes) and samples them whole.
//   else, W divides the features (GPT-2's 50257 = 29 * 1733 over d = 768):
//     out_sharding P(None, None, None, unreduced=axes): each device computes
//     partial logits over its slice of the features; sample's gather
//     all-reduces them.
// Either way the table (param) is untouched: pushes, pulls and the full
// model's logits keep the checkpoint's shapes. Without `mesh` (or on one
// device) the head is computed whole on every device.
// Cost: the compiler makes each device's table slice with a copy step from
// the replicated param; the worker does not copy it but reads it in place
// (common/program/compute_step.h ParamSliceOf: rows [a, b) of the row-major
// [V, d] table, or columns [a, b) of each row as a strided matrix), so each
// device streams only its 1/W of the table per step.
// \error InspectLm's; kInvalidArgument for token_slots < 1 or rows outside
//   [1, token_slots].
absl::StatusOr<ModelFile> DecodeVariant(const ModelFile& model, int64_t token_slots,
                                        int64_t rows, const Mesh* mesh = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_DECODE_MODEL_H_
