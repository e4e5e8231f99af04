#include "server/worker/compute_step.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

constexpr absl::string_view kOps[] = {
    "dot_general", "add",     "mul",     "silu",      "relu",  "gelu",
    "tanh",        "rms_norm", "layer_norm", "softmax", "reshape", "transpose",
    "embed",       "copy",    "zeros"};

size_t NumInputsOf(absl::string_view op) {
  if (op == "zeros") return 0;
  if (op == "dot_general" || op == "add" || op == "mul" || op == "rms_norm" ||
      op == "embed") {
    return 2;
  }
  if (op == "layer_norm") return 3;
  return 1;
}

// Runs the kernel for `op` on local tensors; the result's dtype is `out`.
absl::StatusOr<Tensor> RunKernel(const StepIr& step,
                                 absl::Span<const BoxTensor* const> in,
                                 const Box& out_box, DType out) {
  const std::string& op = step.op;
  if (op == "dot_general") {
    return DotGeneral(in[0]->tensor, in[1]->tensor, step.lhs_contracting,
                      step.rhs_contracting, step.lhs_batch, step.rhs_batch, out);
  }
  if (op == "add") return Add(in[0]->tensor, in[1]->tensor, out);
  if (op == "mul") return Mul(in[0]->tensor, in[1]->tensor, out);
  if (op == "relu") return Relu(in[0]->tensor, out);
  if (op == "gelu") return Gelu(in[0]->tensor, out);
  if (op == "silu") return Silu(in[0]->tensor, out);
  if (op == "tanh") return Tanh(in[0]->tensor, out);
  if (op == "rms_norm") return RmsNorm(in[0]->tensor, in[1]->tensor, step.epsilon, out);
  if (op == "layer_norm") {
    return LayerNorm(in[0]->tensor, in[1]->tensor, in[2]->tensor, step.epsilon, out);
  }
  if (op == "softmax") {
    return Softmax(in[0]->tensor, step.perm.empty() ? -1 : step.perm[0], out);
  }
  if (op == "embed") return Embed(in[0]->tensor, *in[1], out);
  if (op == "transpose") {
    MS_ASSIGN_OR_RETURN(Tensor t, Transpose(in[0]->tensor, step.perm));
    return ConvertDType(t, out);
  }
  if (op == "reshape") {
    MS_ASSIGN_OR_RETURN(Tensor t, Reshape(in[0]->tensor, out_box.shape()));
    if (t.dtype() == out) return t;
    return ConvertDType(t, out);
  }
  if (op == "copy") {
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*in[0], out_box));
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(in[0]->tensor.dtype(), out_box.shape(),
                                                    bytes));
    if (t.dtype() == out) return t;
    return ConvertDType(t, out);
  }
  if (op == "zeros") return Tensor::Create(out, out_box.shape());
  return InvalidArgument("unknown compute op '", op, "'");
}

}  // namespace

bool IsKnownComputeOp(absl::string_view op) {
  for (absl::string_view known : kOps) {
    if (op == known) return true;
  }
  return false;
}

absl::StatusOr<BoxTensor> RunComputeStep(const StepIr& step,
                                         absl::Span<const BoxTensor* const> inputs) {
  const std::string where = absl::StrCat("compute '", step.op, "' -> '", step.output, "'");
  if (!IsKnownComputeOp(step.op)) {
    return InvalidArgument(where, ": unknown compute op '", step.op, "'");
  }
  if (inputs.size() != NumInputsOf(step.op)) {
    return InvalidArgument(where, ": takes ", NumInputsOf(step.op), " inputs, got ",
                           inputs.size());
  }
  MS_ASSIGN_OR_RETURN(Box out_box, BoxFromIr(step.out_box), where, ": out_box");
  DType out = DType::kFloat32;
  if (step.partial) {
    out = DType::kFloat32;
  } else if (step.out_dtype != kWireInvalid) {
    MS_ASSIGN_OR_RETURN(out, DTypeFromProto(step.out_dtype), where, ": out_dtype");
  } else if (!inputs.empty()) {
    out = inputs[0]->tensor.dtype();
  }
  MS_ASSIGN_OR_RETURN(Tensor result, RunKernel(step, inputs, out_box, out), where);
  if (result.shape() != out_box.shape()) {
    return InvalidArgument(where, ": result shape ", ShapeToString(result.shape()),
                           " does not match out_box ", out_box.ToString(), " (shape ",
                           ShapeToString(out_box.shape()), ")");
  }
  return BoxTensor::Wrap(std::move(out_box), std::move(result));
}

}  // namespace meshserve
