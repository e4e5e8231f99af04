// ValidateProgram (program_run.h): ProgramRunner::Install's structural checks.
#include <string>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "server/worker/program_run.h"

namespace meshserve {
namespace {

absl::Status CheckName(absl::string_view field, const std::string& name, bool writable) {
  if (name.empty()) return InvalidArgument(field, " is empty");
  if (writable && IsParamBuffer(name)) {
    return InvalidArgument(field, " '", name, "' is a resident parameter (read-only)");
  }
  return absl::OkStatus();
}

absl::Status CheckBox(absl::string_view field, const BoxIr& box) {
  return AnnotateStatus(BoxFromIr(box).status(), field);
}

// A send's (or recv's) tag is not empty and used once per program.
absl::Status CheckTag(absl::string_view field, const std::string& tag,
                      absl::flat_hash_set<std::string>* used) {
  MS_RETURN_IF_ERROR(CheckName(field, tag, false));
  if (!used->insert(tag).second) return InvalidArgument(field, " '", tag, "' is used twice");
  return absl::OkStatus();
}

// One check per step kind.
class StepValidator {
 public:
  absl::Status operator()(const ComputeStepIr& step) {
    MS_RETURN_IF_ERROR(CheckName("compute output", step.output, true));
    return CheckBox("compute out_box", step.out_box);
  }
  absl::Status operator()(const SendStepIr& step) {
    MS_RETURN_IF_ERROR(CheckName("send buffer", step.buffer, false));
    MS_RETURN_IF_ERROR(CheckTag("send tag", step.tag, &send_tags_));
    MS_RETURN_IF_ERROR(CheckBox("send box", step.box));
    if (step.dst_worker < 0) return InvalidArgument("send dst_worker ", step.dst_worker);
    return absl::OkStatus();
  }
  absl::Status operator()(const RecvStepIr& step) {
    MS_RETURN_IF_ERROR(CheckName("recv buffer", step.buffer, true));
    MS_RETURN_IF_ERROR(CheckTag("recv tag", step.tag, &recv_tags_));
    MS_RETURN_IF_ERROR(CheckBox("recv box", step.box));
    return CheckBox("recv buffer_box", step.buffer_box);
  }
  absl::Status operator()(const CopyStepIr& step) {
    MS_RETURN_IF_ERROR(CheckName("copy src", step.src, false));
    MS_RETURN_IF_ERROR(CheckName("copy dst", step.dst, true));
    MS_RETURN_IF_ERROR(CheckBox("copy box", step.box));
    MS_RETURN_IF_ERROR(CheckBox("copy dst_box", step.dst_box));
    if (step.dst_device < 0) return OutOfRange("copy dst_device ", step.dst_device);
    return absl::OkStatus();
  }
  absl::Status operator()(const FreeStepIr& step) {
    return CheckName("free buffer", step.buffer, true);
  }
  absl::Status operator()(const OutputStepIr& step) {
    MS_RETURN_IF_ERROR(CheckName("output buffer", step.buffer, false));
    MS_RETURN_IF_ERROR(CheckName("output name", step.output, false));
    return CheckBox("output box", step.box);
  }

 private:
  absl::flat_hash_set<std::string> send_tags_, recv_tags_;
};

}  // namespace

absl::Status ValidateProgram(const ProgramIr& program) {
  if (program.program_id.empty()) return InvalidArgument("program_id is empty");
  const std::string where = absl::StrCat("program '", program.program_id, "'");
  if (program.model.empty()) return InvalidArgument(where, ": model is empty");
  StepValidator validator;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const StepIr& step = program.steps[i];
    if (StepDevice(step) < 0) {
      return OutOfRange(where, " step ", i, ": device ", StepDevice(step), " is negative");
    }
    MS_RETURN_IF_ERROR(std::visit(validator, step), where, " step ", i);
  }
  return absl::OkStatus();
}

}  // namespace meshserve
