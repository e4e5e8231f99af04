// WorkerEngine::InstallProgram's structural checks.
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "server/worker/compute_step.h"
#include "server/worker/worker_engine_internal.h"

namespace meshserve {
namespace {

absl::Status CheckName(absl::string_view field, const std::string& name, bool writable) {
  if (name.empty()) return InvalidArgument(field, " is empty");
  if (writable && absl::StartsWith(name, "param/")) {
    return InvalidArgument(field, " '", name, "' is a resident parameter (read-only)");
  }
  return absl::OkStatus();
}

absl::Status CheckBox(absl::string_view field, const BoxIr& box) {
  return AnnotateStatus(BoxFromIr(box).status(), field);
}

absl::Status CheckDType(absl::string_view field, int dtype, bool required) {
  if (dtype == kWireInvalid && !required) return absl::OkStatus();
  return AnnotateStatus(DTypeFromProto(dtype).status(), field);
}

absl::Status ValidateStep(const StepIr& step, absl::flat_hash_set<std::string>* send_tags,
                          absl::flat_hash_set<std::string>* recv_tags) {
  if (step.device < 0) return OutOfRange("device ", step.device, " is negative");
  switch (step.kind) {
    case StepIr::Kind::kNone:
      return InvalidArgument("step has no kind");
    case StepIr::Kind::kCompute:
      if (!IsKnownComputeOp(step.op)) return InvalidArgument("unknown compute op '", step.op, "'");
      MS_RETURN_IF_ERROR(CheckName("compute output", step.output, true));
      MS_RETURN_IF_ERROR(CheckBox("compute out_box", step.out_box));
      return CheckDType("compute out_dtype", step.out_dtype, false);
    case StepIr::Kind::kSend:
      MS_RETURN_IF_ERROR(CheckName("send buffer", step.buffer, false));
      MS_RETURN_IF_ERROR(CheckName("send tag", step.tag, false));
      MS_RETURN_IF_ERROR(CheckBox("send box", step.box));
      if (step.dst_worker < 0) return InvalidArgument("send dst_worker ", step.dst_worker);
      if (!send_tags->insert(step.tag).second) {
        return InvalidArgument("send tag '", step.tag, "' is used twice");
      }
      return absl::OkStatus();
    case StepIr::Kind::kRecv:
      MS_RETURN_IF_ERROR(CheckName("recv buffer", step.buffer, true));
      MS_RETURN_IF_ERROR(CheckName("recv tag", step.tag, false));
      MS_RETURN_IF_ERROR(CheckBox("recv box", step.box));
      MS_RETURN_IF_ERROR(CheckBox("recv buffer_box", step.buffer_box));
      MS_RETURN_IF_ERROR(CheckDType("recv dtype", step.dtype, false));
      if (!recv_tags->insert(step.tag).second) {
        return InvalidArgument("recv tag '", step.tag, "' is used twice");
      }
      return absl::OkStatus();
    case StepIr::Kind::kCopy:
      MS_RETURN_IF_ERROR(CheckName("copy src", step.buffer, false));
      MS_RETURN_IF_ERROR(CheckName("copy dst", step.dst, true));
      MS_RETURN_IF_ERROR(CheckBox("copy box", step.box));
      MS_RETURN_IF_ERROR(CheckBox("copy dst_box", step.buffer_box));
      if (step.dst_device < 0) return OutOfRange("copy dst_device ", step.dst_device);
      return CheckDType("copy dtype", step.dtype, false);
    case StepIr::Kind::kFree:
      return CheckName("free buffer", step.buffer, true);
    case StepIr::Kind::kOutput:
      MS_RETURN_IF_ERROR(CheckName("output buffer", step.buffer, false));
      MS_RETURN_IF_ERROR(CheckName("output name", step.output, false));
      return CheckBox("output box", step.box);
  }
  return InvalidArgument("unknown step kind");
}

}  // namespace

absl::Status ValidateProgram(const ProgramIr& program) {
  if (program.program_id.empty()) return InvalidArgument("program_id is empty");
  const std::string where = absl::StrCat("program '", program.program_id, "'");
  if (program.model.empty()) return InvalidArgument(where, ": model is empty");
  absl::flat_hash_set<std::string> send_tags, recv_tags;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    MS_RETURN_IF_ERROR(ValidateStep(program.steps[i], &send_tags, &recv_tags), where,
                       " step ", i);
  }
  return absl::OkStatus();
}

}  // namespace meshserve
