#include "common/program/compute_step.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/decode_kernels.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/dot_general.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

// The global index of out_box's first element along dim `axis` (< 0 counts
// from the end): what positions and rope count from. `what` names the field.
absl::StatusOr<int64_t> GlobalDimBegin(const Box& out_box, int64_t axis, absl::string_view what) {
  const int64_t rank = out_box.rank();
  if (axis < -rank || axis >= rank) {
    return InvalidArgument(what, " ", axis, " is out of range for out_box ", out_box.ToString());
  }
  return out_box[static_cast<int>(axis < 0 ? axis + rank : axis)].begin;
}

SoftmaxOptions SoftmaxOptionsOf(const ComputeStepIr& step, const Box& out_box) {
  SoftmaxOptions o;
  o.scale = step.scale == 0 ? 1.0f : step.scale;
  o.causal = step.causal;
  const int rank = out_box.rank();
  if (rank >= 2) {
    o.q_offset = out_box[rank - 2].begin;
    o.k_offset = out_box[rank - 1].begin;
  }
  return o;
}

// With vocab_size > 0, every id must lie in [0, vocab_size).
absl::Status CheckEmbedIds(const Tensor& ids, int64_t vocab_size) {
  if (vocab_size <= 0) return absl::OkStatus();
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    int64_t id = 0;
    if (ids.dtype() == DType::kInt32) {
      id = ids.data<int32_t>()[i];
    } else if (ids.dtype() == DType::kInt64) {
      id = ids.data<int64_t>()[i];
    } else {
      return absl::OkStatus();  // Embed names the dtype error
    }
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("embed: id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
    }
  }
  return absl::OkStatus();
}

// Runs the kernel of step.op on local tensors (as many as its arity); the
// result's dtype is `out`. No default: -Wswitch names an op of the table
// without a kernel.
// attention, in or outside a generation step.
absl::StatusOr<Tensor> RunAttention(const ComputeStepIr& step,
                                    absl::Span<const BoxTensor* const> in, DType out,
                                    const DecodeState* decode) {
  const Tensor& q = in[0]->tensor;
  const Tensor& k = in[1]->tensor;
  if (q.rank() != 4 || k.rank() != 4) {
    return InvalidArgument("attention: q ", q.ToString(), " and k ", k.ToString(),
                           " must be rank 4");
  }
  const float scale = step.attention_scale > 0
                          ? step.attention_scale
                          : 1.0f / std::sqrt(static_cast<float>(q.dim(3)));
  Tensor result;
  if (decode == nullptr) {
    MS_ASSIGN_OR_RETURN(result, CausalAttention(q, k, in[2]->tensor, scale));
  } else {
    MS_ASSIGN_OR_RETURN(KvCache * cache,
                        decode->cache(step.device, step.num_cache_layers, k.dim(2), k.dim(3)));
    MS_ASSIGN_OR_RETURN(result, CachedStepAttention(*cache, step.cache_layer, q, k,
                                                    in[2]->tensor, *decode->layout, scale));
  }
  if (result.dtype() == out) return result;
  return ConvertDType(result, out);
}

absl::StatusOr<Tensor> RunKernel(const ComputeStepIr& step,
                                 absl::Span<const BoxTensor* const> in,
                                 const Box& out_box, DType out, const DecodeState* decode) {
  const PositionTable table =
      decode != nullptr ? PositionTable(decode->positions) : PositionTable();
  switch (step.op) {
    case ComputeOp::kDotGeneral:
      return DotGeneral(in[0]->tensor, in[1]->tensor, step.lhs_contracting,
                        step.rhs_contracting, step.lhs_batch, step.rhs_batch, out);
    case ComputeOp::kAdd: return Add(in[0]->tensor, in[1]->tensor, out);
    case ComputeOp::kMul: return Mul(in[0]->tensor, in[1]->tensor, out);
    case ComputeOp::kRelu: return Relu(in[0]->tensor, out);
    case ComputeOp::kGelu: return Gelu(in[0]->tensor, out);
    case ComputeOp::kSilu: return Silu(in[0]->tensor, out);
    case ComputeOp::kTanh: return Tanh(in[0]->tensor, out);
    case ComputeOp::kRmsNorm:
      return RmsNorm(in[0]->tensor, in[1]->tensor, step.epsilon, out);
    case ComputeOp::kLayerNorm:
      return LayerNorm(in[0]->tensor, in[1]->tensor, in[2]->tensor, step.epsilon, out);
    case ComputeOp::kSoftmax:
    case ComputeOp::kSoftmaxWhere: {
      const int64_t axis = step.softmax_axis;
      const Tensor* where = step.op == ComputeOp::kSoftmaxWhere ? &in[1]->tensor : nullptr;
      if (where == nullptr && !step.causal && (step.scale == 0 || step.scale == 1)) {
        return Softmax(in[0]->tensor, axis, out);
      }
      return MaskedSoftmax(in[0]->tensor, axis, SoftmaxOptionsOf(step, out_box), where, out);
    }
    case ComputeOp::kEmbed:
      MS_RETURN_IF_ERROR(CheckEmbedIds(in[0]->tensor, step.vocab_size));
      return Embed(in[0]->tensor, *in[1], out);
    case ComputeOp::kPositions: {
      MS_ASSIGN_OR_RETURN(int64_t offset,
                          GlobalDimBegin(out_box, step.positions_axis, "positions_axis"));
      return Positions(out_box.shape(), step.positions_axis, offset, table);
    }
    case ComputeOp::kRope: {
      MS_ASSIGN_OR_RETURN(int64_t offset,
                          GlobalDimBegin(out_box, step.rope_seq_axis, "rope_seq_axis"));
      return Rope(in[0]->tensor, step.rope_seq_axis, offset, step.theta, out, table);
    }
    case ComputeOp::kTranspose: {
      MS_ASSIGN_OR_RETURN(Tensor t, Transpose(in[0]->tensor, step.perm));
      return ConvertDType(t, out);
    }
    case ComputeOp::kReshape: {
      MS_ASSIGN_OR_RETURN(Tensor t, Reshape(in[0]->tensor, out_box.shape()));
      if (t.dtype() == out) return t;
      return ConvertDType(t, out);
    }
    case ComputeOp::kCopy: {
      MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*in[0], out_box));
      MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(in[0]->tensor.dtype(), out_box.shape(),
                                                      bytes));
      if (t.dtype() == out) return t;
      return ConvertDType(t, out);
    }
    case ComputeOp::kZeros: return Tensor::Create(out, out_box.shape());
    case ComputeOp::kAttention: return RunAttention(step, in, out, decode);
    case ComputeOp::kSelectRows: {
      MS_ASSIGN_OR_RETURN(Tensor rows, SelectRows(in[0]->tensor, out_box.shape()[1],
                                                  decode != nullptr ? decode->layout : nullptr));
      if (rows.dtype() == out) return rows;
      return ConvertDType(rows, out);
    }
    case ComputeOp::kSample:
      return SampleRows(in[0]->tensor, step.vocab_size,
                        decode != nullptr ? decode->layout : nullptr);
  }
  return InvalidArgument("compute op ", static_cast<int>(step.op), " has no kernel");
}

// dot_general with its rhs read in place from `slice` when DotGeneralInPlace
// takes its dims (lhs's last dim and the slice's dim 0 or 1, no batch);
// nullopt otherwise.
std::optional<absl::StatusOr<Tensor>> DotInPlace(const ComputeStepIr& step, const Tensor& lhs,
                                                 const ParamSlice& slice, DType out) {
  if (step.op != ComputeOp::kDotGeneral || !step.lhs_batch.empty() ||
      !step.rhs_batch.empty() || step.lhs_contracting.size() != 1 ||
      step.rhs_contracting.size() != 1 || step.lhs_contracting[0] != lhs.rank() - 1 ||
      (step.rhs_contracting[0] != 0 && step.rhs_contracting[0] != 1)) {
    return std::nullopt;
  }
  const Box& whole = slice.param->box;
  StridedMatrix w;
  w.row_stride = whole[1].size();
  w.rows = slice.box[0].size();
  w.cols = slice.box[1].size();
  w.data = slice.param->tensor.data<float>() + (slice.box[0].begin - whole[0].begin) *
                                                   w.row_stride +
           (slice.box[1].begin - whole[1].begin);
  return DotGeneralInPlace(lhs, w, step.rhs_contracting[0], out);
}

}  // namespace

std::optional<ParamSlice> ParamSliceOf(const CopyStepIr& copy, const BoxTensor& src) {
  std::optional<Box> box = ParamSliceBoxOf(copy);
  if (!box.has_value() || src.tensor.dtype() != DType::kFloat32 || src.tensor.rank() != 2 ||
      !src.box.Contains(*box)) {
    return std::nullopt;
  }
  return ParamSlice{&src, *std::move(box)};
}

absl::StatusOr<BoxTensor> CopyParamSlice(const ParamSlice& slice) {
  MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*slice.param, slice.box));
  MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(DType::kFloat32, slice.box.shape(), bytes));
  return BoxTensor::Wrap(slice.box, std::move(t));
}

absl::StatusOr<BoxTensor> RunComputeStep(const ComputeStepIr& step,
                                         absl::Span<const BoxTensor* const> inputs,
                                         const DecodeState* decode,
                                         const ParamSlice* rhs_in_place) {
  const std::string where = absl::StrCat("compute '", ComputeOpName(step.op), "' -> '",
                                         step.output, "'");
  const int arity = ComputeOpArity(step.op);
  if (inputs.size() != static_cast<size_t>(arity)) {
    return InvalidArgument(where, ": takes ", arity, " inputs, got ", inputs.size());
  }
  if (rhs_in_place != nullptr && (inputs.size() < 2 || inputs[0] == nullptr)) {
    return InvalidArgument(where, ": an input read in place needs input 0 and 1");
  }
  MS_ASSIGN_OR_RETURN(Box out_box, BoxFromIr(step.out_box), where, ": out_box");
  DType out = DType::kFloat32;
  if (step.partial) {
    out = DType::kFloat32;
  } else if (step.out_dtype.has_value()) {
    out = *step.out_dtype;
  } else if (!inputs.empty()) {
    out = inputs[0]->tensor.dtype();
  }
  if (decode != nullptr && decode->layout == nullptr) {
    return InvalidArgument(where, ": a generation step without its layout");
  }
  std::vector<const BoxTensor*> in(inputs.begin(), inputs.end());
  std::optional<absl::StatusOr<Tensor>> in_place;
  BoxTensor copied;
  if (rhs_in_place != nullptr) {
    if (in.size() == 2) in_place = DotInPlace(step, in[0]->tensor, *rhs_in_place, out);
    if (!in_place.has_value()) {
      MS_ASSIGN_OR_RETURN(copied, CopyParamSlice(*rhs_in_place), where);
      in[1] = &copied;
    }
  }
  MS_ASSIGN_OR_RETURN(Tensor result,
                      in_place.has_value() ? *std::move(in_place)
                                           : RunKernel(step, in, out_box, out, decode),
                      where);
  if (result.shape() != out_box.shape()) {
    return InvalidArgument(where, ": result shape ", ShapeToString(result.shape()),
                           " does not match out_box ", out_box.ToString(), " (shape ",
                           ShapeToString(out_box.shape()), ")");
  }
  return BoxTensor::Wrap(std::move(out_box), std::move(result));
}

}  // namespace meshserve
