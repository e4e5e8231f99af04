// What the worker knows of a program's steps apart from running them
// (program_run.h): their names in messages, which ones run while
// sends queue up, the send schedule and the rest of what InstallProgram
// prepares (PrepareProgram); and
// RunProgram, the waiting form of RunProgramAsync (program_run.cc); the
// helpers of program_steps.h.
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/status_macros.h"
#include "common/program/compute_step.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/worker/program_run.h"
#include "server/worker/program_steps.h"

namespace meshserve {
namespace {

// For error messages: "compute 'add' -> 'y'", "send 'x' tag 't' to worker 1", ...
struct StepName {
  std::string operator()(const ComputeStepIr& s) const {
    return absl::StrCat("compute '", ComputeOpName(s.op), "' -> '", s.output, "'");
  }
  std::string operator()(const SendStepIr& s) const {
    return absl::StrCat("send '", s.buffer, "' tag '", s.tag, "' to worker ", s.dst_worker);
  }
  std::string operator()(const RecvStepIr& s) const {
    return absl::StrCat("recv '", s.buffer, "' tag '", s.tag, "' from worker ", s.src_worker);
  }
  std::string operator()(const CopyStepIr& s) const {
    return absl::StrCat("copy '", s.src, "' -> device ", s.dst_device, " '", s.dst, "'");
  }
  std::string operator()(const FreeStepIr& s) const {
    return absl::StrCat("free '", s.buffer, "'");
  }
  std::string operator()(const OutputStepIr& s) const {
    return absl::StrCat("output '", s.output, "' from '", s.buffer, "'");
  }
};


// The buffer a step writes, creates or frees (device, name); none for sends
// and outputs, which only read.
bool Writes(const StepIr& step, int64_t device, const std::string& buffer) {
  const StepAccess access = AccessOf(step);
  const DeviceBufferIr key(device, buffer);
  return access.writes == key || access.frees == key;
}

}  // namespace

Counter& ComputeSeconds() {
  static Counter* const seconds = &GlobalMetricRegistry().AddCounter(
      "meshserve_worker_compute_seconds_total",
      "Time in compute steps by op (op=\"dot_general\": the worker's GEMM time).", {"op"});
  return *seconds;
}
namespace {
[[maybe_unused]] const Counter& registered_at_start = ComputeSeconds();
}  // namespace

absl::Status InsertConverted(BoxTensor* dst, const Box& box, DType from,
                             absl::string_view bytes, bool accumulate) {
  if (from == dst->tensor.dtype()) return InsertBox(dst, box, bytes, accumulate);
  MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(from, box.shape(), bytes));
  MS_ASSIGN_OR_RETURN(t, ConvertDType(t, dst->tensor.dtype()));
  return InsertBox(dst, box, t.bytes(), accumulate);
}

absl::Status CheckHostsDevice(const LoadedModel& model, int64_t device) {
  if (model.HostsDevice(device)) return absl::OkStatus();
  return InvalidArgument("device ", device, " is not hosted by this worker for model '",
                         model.model, "' generation ", model.generation, " (hosted: ",
                         model.DevicesString(), ")");
}

absl::Status AddInputBuffers(const LoadedModel& model, std::vector<SliceIr> inputs,
                             absl::node_hash_map<RunBufferKey, BoxTensor>* buffers) {
  for (SliceIr& slice : inputs) {
    MS_RETURN_IF_ERROR(CheckHostsDevice(model, slice.device), "input '", slice.name, "'");
    MS_ASSIGN_OR_RETURN(BoxTensor tensor, BoxTensorFromSlice(slice), "input");
    slice.data.clear();
    slice.data.shrink_to_fit();
    auto [it, inserted] =
        buffers->try_emplace(RunBufferKey(slice.device, InputBuffer(slice.name)));
    if (!inserted) {
      return InvalidArgument("input '", slice.name, "' given twice for device ",
                             slice.device);
    }
    it->second = std::move(tensor);
  }
  return absl::OkStatus();
}

std::string DescribeStep(const StepIr& step) { return std::visit(StepName(), step); }

bool DefersFlush(const StepIr& step) {
  return std::holds_alternative<SendStepIr>(step) || std::holds_alternative<CopyStepIr>(step) ||
         std::holds_alternative<FreeStepIr>(step);
}

std::vector<size_t> SendScheduleOrder(const std::vector<StepIr>& steps) {
  std::vector<size_t> out;
  out.reserve(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto* send = std::get_if<SendStepIr>(&steps[s]);
    size_t at = out.size();
    if (send != nullptr) {
      // Back to the last step that writes the source; the earliest receive
      // after it is where the send goes (before it), so that no worker waits
      // for a peer that waits for it.
      for (size_t i = out.size(); i-- > 0;) {
        if (Writes(steps[out[i]], send->device, send->buffer)) break;
        if (std::holds_alternative<RecvStepIr>(steps[out[i]])) at = i;
      }
    }
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), s);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<InstalledProgram>> PrepareProgram(ProgramIr program) {
  MS_RETURN_IF_ERROR(ValidateProgram(program));
  MS_ASSIGN_OR_RETURN(ParamOnlySteps param_only, AnalyzeParamOnlySteps(program));
  // The runs follow the send schedule; the marks follow their steps.
  ReorderSteps(SendScheduleOrder(program.steps), &program, &param_only);
  auto installed = std::make_shared<InstalledProgram>();
  installed->ir = std::move(program);
  installed->param_only = std::move(param_only);
  static std::atomic<int64_t> installs{0};
  installed->cache_key = absl::StrCat(installed->ir.program_id, "#", ++installs);
  return installed;
}

std::vector<StepIr> ScheduleSends(std::vector<StepIr> steps) {
  std::vector<StepIr> out;
  out.reserve(steps.size());
  for (size_t i : SendScheduleOrder(steps)) out.push_back(std::move(steps[i]));
  return out;
}

absl::StatusOr<std::vector<SliceIr>> RunProgram(const ProgramIr& program,
                                                const LoadedModel& model,
                                                absl::string_view request_id,
                                                std::vector<SliceIr> inputs,
                                                absl::Time deadline,
                                                const RunContext& context) {
  auto installed = std::make_shared<InstalledProgram>();
  installed->ir = program;
  std::unique_ptr<DeadlineTimer> own_timer;
  RunContext with_timer = context;
  if (with_timer.timer == nullptr) {
    own_timer = std::make_unique<DeadlineTimer>();
    with_timer.timer = own_timer.get();
  }
  absl::Notification finished;
  absl::StatusOr<std::vector<SliceIr>> result;
  // Not owned: this call outlives the run's use of the model (done is its last).
  std::shared_ptr<const LoadedModel> unowned(std::shared_ptr<const LoadedModel>(), &model);
  RunProgramAsync(std::move(installed), std::move(unowned), std::string(request_id),
                  std::move(inputs), deadline, std::move(with_timer),
                  [&](absl::StatusOr<std::vector<SliceIr>> out) {
                    result = std::move(out);
                    finished.Notify();
                  });
  finished.WaitForNotification();
  return result;
}

}  // namespace meshserve
