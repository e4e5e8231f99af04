// Cutting a request into its workers' calls and assembling the answer
// (infer_calls.h).
#include "server/coordinator/infer_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"

namespace meshserve {
namespace {

// Output `out` from one replica of each of its boxes (plan.output_pieces),
// written straight into the response's bytes.
absl::StatusOr<InferOutput> AssembleOutput(const PlanOutput& out, const CompiledPlan& plan,
                                           const std::map<int64_t, ExecuteResult>& by_worker) {
  InferOutput result;
  result.tensor.name = out.name;
  result.tensor.dtype = out.dtype;
  result.tensor.shape = out.shape;
  result.type_str = out.type_str;
  const int64_t elem = DTypeSize(out.dtype);
  result.tensor.bytes.resize(static_cast<size_t>(Box::FromShape(out.shape).NumElements() * elem));
  for (const OutputPiece& piece : plan.output_pieces) {
    if (piece.output != out.name) continue;
    const BoxIr want = BoxToIr(piece.box);
    const SliceIr* found = nullptr;
    auto it = by_worker.find(piece.worker);
    if (it != by_worker.end()) {
      for (const SliceIr& s : it->second.outputs) {
        if (s.name == out.name && s.device == piece.device && s.box == want) found = &s;
      }
    }
    if (found == nullptr) {
      return Internal("worker ", piece.worker, " did not return output '", out.name, "' box ",
                      piece.box.ToString(), " of device ", piece.device);
    }
    if (found->dtype != out.dtype) {
      return Internal("worker ", piece.worker, " returned output '", out.name, "' with dtype ",
                      found->dtype ? DTypeName(*found->dtype) : "(none)", ", expected ",
                      DTypeName(out.dtype));
    }
    const std::string where = absl::StrCat("worker ", piece.worker, " output '", out.name, "'");
    if (static_cast<int64_t>(found->data.size()) != piece.box.NumElements() * elem) {
      return InvalidArgument(where, ": ", found->data.size(), " bytes for box ",
                             piece.box.ToString(), ", expected ", piece.box.NumElements() * elem);
    }
    MS_RETURN_IF_ERROR(
        InsertBoxBytes(result.tensor.bytes.data(), out.shape, elem, piece.box, found->data.data()), where);
  }
  return result;
}

}  // namespace

int64_t SliceBytes(const std::vector<SliceIr>& slices) {
  int64_t n = 0;
  for (const SliceIr& s : slices) n += static_cast<int64_t>(s.data.size());
  return n;
}

absl::StatusOr<std::map<int64_t, ExecuteCall>> BuildCalls(
    const CompiledPlan& plan, const std::map<std::string, const NamedTensor*>& inputs,
    const std::string& request_id, int64_t deadline_ms) {
  std::map<int64_t, ExecuteCall> calls;
  for (const auto& [worker, program] : plan.programs) {
    ExecuteCall& call = calls[worker];
    call.program_id = plan.program_id;
    call.request_id = request_id;
    call.deadline_ms = deadline_ms;
  }
  for (const InputSlice& s : plan.input_slices) {
    auto it = inputs.find(s.input);
    if (it == inputs.end()) return Internal("plan slices unknown input '", s.input, "'");
    const NamedTensor& in = *it->second;
    SliceIr slice;
    slice.name = s.input;
    slice.device = s.device;
    slice.box = BoxToIr(s.box);
    slice.dtype = in.dtype;
    slice.data.resize(static_cast<size_t>(s.box.NumElements() * DTypeSize(in.dtype)));
    // ValidateInferRequest checked in.bytes against in.shape; the box lies in it.
    MS_RETURN_IF_ERROR(
        ExtractBoxBytes(in.bytes.data(), in.shape, DTypeSize(in.dtype), s.box, slice.data.data()),
        "input '", s.input, "'");
    auto call = calls.find(s.worker);
    if (call == calls.end()) {
      call =
          calls.emplace(s.worker, ExecuteCall{plan.program_id, request_id, {}, deadline_ms}).first;
    }
    call->second.inputs.push_back(std::move(slice));
  }
  return calls;
}

std::map<int64_t, int64_t> OutputBytesByWorker(const CompiledPlan& plan) {
  std::map<std::string, int64_t> elem;
  for (const PlanOutput& out : plan.outputs) elem[out.name] = DTypeSize(out.dtype);
  std::map<int64_t, int64_t> bytes;
  for (const OutputPiece& piece : plan.output_pieces) {
    bytes[piece.worker] += piece.box.NumElements() * elem[piece.output];
  }
  return bytes;
}

absl::StatusOr<InferResponse> AssembleResponse(const ValidatedRequest& v,
                                               const InferRequest& request,
                                               const Placement& placement, const CompiledPlan& plan,
                                               const std::map<int64_t, ExecuteResult>& by_worker) {
  InferResponse response;
  response.model = request.model;
  response.id = request.id;
  response.generation = placement.generation;
  response.param_version = request.param_version > 0 ? request.param_version : placement.version;
  for (const PlanOutput& out : plan.outputs) {
    if (std::find(v.outputs.begin(), v.outputs.end(), out.name) == v.outputs.end()) continue;
    MS_ASSIGN_OR_RETURN(InferOutput result, AssembleOutput(out, plan, by_worker));
    response.outputs.push_back(std::move(result));
  }
  return response;
}

}  // namespace meshserve
