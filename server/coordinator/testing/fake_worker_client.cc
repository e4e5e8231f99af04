#include "server/coordinator/testing/fake_worker_client.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"

namespace meshserve {

absl::Status FakeWorkerClient::CheckUp() const {
  if (down_) return Unavailable("fake worker ", worker_id_, " is down");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FakeWorkerClient::LoadModel(const LoadModelIr& call,
                                                    absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  auto failure = load_failures_.find(call.model);
  if (failure != load_failures_.end()) return failure->second;
  for (int64_t d : call.devices) {
    if (d < 0 || d >= static_cast<int64_t>(call.device_workers.size()) ||
        call.device_workers[d] != worker_id_) {
      return InvalidArgument("fake worker ", worker_id_, ": device ", d, " is not mine");
    }
  }
  loaded_[{call.model, call.generation}] = call.devices;
  return 0;
}

absl::Status FakeWorkerClient::UnloadModel(const std::string& model, int64_t generation,
                                           absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  loaded_.erase({model, generation});
  unloaded_.push_back({model, generation});
  return absl::OkStatus();
}

absl::Status FakeWorkerClient::InstallProgram(const ProgramIr& program, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  ++install_calls_;
  if (!loaded_.count({program.model, program.generation})) {
    return FailedPrecondition("fake worker ", worker_id_, ": model '", program.model,
                              "' generation ", program.generation, " not loaded");
  }
  programs_[program.program_id] = program;
  return absl::OkStatus();
}

absl::StatusOr<ExecuteResult> FakeWorkerClient::Execute(ExecuteCall call,
                                                        absl::Duration) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    MS_RETURN_IF_ERROR(CheckUp());
    ++execute_calls_;
    if (!execute_failure_.ok()) {
      absl::Status failure = execute_failure_;
      if (execute_failures_left_ > 0 && --execute_failures_left_ == 0) {
        execute_failure_ = absl::OkStatus();
      }
      return failure;
    }
    delay = execute_delay_;
    max_running_ = std::max(max_running_, ++running_);
  }
  absl::SleepFor(delay);
  absl::MutexLock lock(&mu_);
  --running_;
  MS_RETURN_IF_ERROR(CheckUp());
  std::map<std::pair<int64_t, std::string>, BoxTensor> inputs;
  for (const SliceIr& s : call.inputs) {
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(s.box));
    MS_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(s.dtype));
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(dtype, box.shape(), s.data));
    inputs[{s.device, InputBuffer(s.name)}] = BoxTensor{box, std::move(t)};
  }
  ExecuteResult result;
  auto program = programs_.find(call.program_id);
  if (program == programs_.end()) {
    return FailedPrecondition("fake worker ", worker_id_, ": unknown program '",
                              call.program_id, "'");
  }
  // Only Output steps: each returns a box of an input buffer it was sent.
  for (const StepIr& step : program->second.steps) {
    const auto* output = std::get_if<OutputStepIr>(&step);
    if (output == nullptr) continue;
    auto in = inputs.find({output->device, output->buffer});
    if (in == inputs.end()) continue;
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(output->box));
    SliceIr out;
    out.name = output->output;
    out.device = output->device;
    out.box = output->box;
    out.dtype = DTypeToProto(in->second.tensor.dtype());
    MS_ASSIGN_OR_RETURN(out.data, ExtractBox(in->second, box));
    result.outputs.push_back(std::move(out));
  }
  return result;
}

absl::Status FakeWorkerClient::Cancel(const std::string& request_id, const std::string&,
                                      absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  cancelled_.push_back(request_id);
  return absl::OkStatus();
}

absl::StatusOr<WorkerStatusIr> FakeWorkerClient::Status(absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  WorkerStatusIr result;
  result.worker_id = worker_id_;
  result.blas_core = "Fake";
  for (const auto& [key, devices] : loaded_) {
    result.models.push_back({key.first, key.second, devices, 0});
  }
  return result;
}

void FakeWorkerClient::SetDown(bool down) {
  absl::MutexLock lock(&mu_);
  down_ = down;
}
void FakeWorkerClient::FailExecute(absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  execute_failure_ = times == 0 ? absl::OkStatus() : std::move(status);
  execute_failures_left_ = times;
}
void FakeWorkerClient::FailLoad(const std::string& model, absl::Status status) {
  absl::MutexLock lock(&mu_);
  load_failures_[model] = std::move(status);
}
void FakeWorkerClient::SetExecuteDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  execute_delay_ = delay;
}
int FakeWorkerClient::execute_calls() const {
  absl::MutexLock lock(&mu_);
  return execute_calls_;
}
int FakeWorkerClient::install_calls() const {
  absl::MutexLock lock(&mu_);
  return install_calls_;
}
std::vector<std::string> FakeWorkerClient::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}
std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> FakeWorkerClient::loaded()
    const {
  absl::MutexLock lock(&mu_);
  return loaded_;
}
std::vector<std::pair<std::string, int64_t>> FakeWorkerClient::unloaded() const {
  absl::MutexLock lock(&mu_);
  return unloaded_;
}
int64_t FakeWorkerClient::max_concurrent_executes() const {
  absl::MutexLock lock(&mu_);
  return max_running_;
}

}  // namespace meshserve
