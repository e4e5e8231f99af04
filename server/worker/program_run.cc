// One request's run of a program on this worker (WorkerEngine::Execute).
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics/metric_registry.h"
#include "common/base/status_util.h"
#include "common/program/compute_step.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/worker/worker_engine_internal.h"

namespace meshserve {
namespace {

// Counts a request's sends in flight and keeps the first failure. Shared with
// the transport's callbacks, which may outlive the run.
class SendTracker {
 public:
  void Started() {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  void Done(absl::Status status) {
    absl::MutexLock lock(&mu_);
    --outstanding_;
    if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
  }
  absl::Status first_error() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }
  // Waits until no send is in flight or the deadline passes.
  absl::Status Wait(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return outstanding_ == 0 || !first_error_.ok();
    };
    mu_.AwaitWithDeadline(absl::Condition(&all_done), deadline);
    if (!first_error_.ok()) return first_error_;
    if (outstanding_ > 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(outstanding_, " sends still in flight at the deadline"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

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

class RequestRun {
 public:
  RequestRun(const ProgramIr& program, const LoadedModel& model,
             absl::string_view request_id, absl::Time deadline, const RunContext& context)
      : program_(program),
        model_(model),
        request_id_(request_id),
        deadline_(deadline),
        context_(context),
        sends_(std::make_shared<SendTracker>()) {}

  absl::Status AddInputs(std::vector<SliceIr> inputs);
  absl::Status RunSteps();
  absl::Status WaitForSends() { return sends_->Wait(deadline_); }
  absl::Status SendError() { return sends_->first_error(); }
  std::vector<SliceIr> TakeOutputs() { return std::move(outputs_); }

 private:
  using BufferKey = std::pair<int64_t, std::string>;

  absl::Status CheckDevice(int64_t device) const;
  absl::StatusOr<const BoxTensor*> Lookup(int64_t device, const std::string& name) const;
  // The buffer (device, name), created zero-filled with box/dtype when absent.
  absl::StatusOr<BoxTensor*> GetOrCreate(int64_t device, const std::string& name,
                                         const BoxIr& box, int dtype);

  // One Run per step kind (std::visit calls them).
  struct StepRunner {
    RequestRun* run;
    template <typename Step>
    absl::Status operator()(const Step& step) const {
      return run->Run(step);
    }
  };
  absl::Status Run(const ComputeStepIr& step);
  absl::Status Run(const SendStepIr& step);
  absl::Status Run(const RecvStepIr& step);
  absl::Status Run(const CopyStepIr& step);
  absl::Status Run(const FreeStepIr& step);
  absl::Status Run(const OutputStepIr& step);
  // Hands the sends queued since the last flush to the transport at once.
  void FlushSends();

  const ProgramIr& program_;
  const LoadedModel& model_;
  const std::string request_id_;
  const absl::Time deadline_;
  const RunContext& context_;
  std::shared_ptr<SendTracker> sends_;
  // node_hash_map: pointers to buffers stay valid while others are created.
  absl::node_hash_map<BufferKey, BoxTensor> buffers_;
  std::vector<SliceIr> outputs_;
  // Remote sends queued since the last flush (RunSteps; peer_transport.h).
  std::vector<PeerTransport::Job> pending_sends_;
};

absl::Status RequestRun::CheckDevice(int64_t device) const {
  if (model_.HostsDevice(device)) return absl::OkStatus();
  return InvalidArgument("device ", device, " is not hosted by this worker for model '",
                         model_.model, "' generation ", model_.generation, " (hosted: ",
                         model_.DevicesString(), ")");
}

absl::StatusOr<const BoxTensor*> RequestRun::Lookup(int64_t device,
                                                    const std::string& name) const {
  MS_RETURN_IF_ERROR(CheckDevice(device));
  if (IsParamBuffer(name)) {
    const auto& params = model_.params.at(device);
    auto it = params.find(ParamOfBuffer(name));
    if (it == params.end()) {
      return NotFound("unknown buffer '", name, "' on device ", device, ": model '",
                      model_.model, "' has no param '", ParamOfBuffer(name), "'");
    }
    return it->second.get();
  }
  auto it = buffers_.find(BufferKey(device, name));
  if (it == buffers_.end()) {
    return NotFound("unknown buffer '", name, "' on device ", device);
  }
  return &it->second;
}

absl::StatusOr<BoxTensor*> RequestRun::GetOrCreate(int64_t device, const std::string& name,
                                                   const BoxIr& box, int dtype) {
  MS_RETURN_IF_ERROR(CheckDevice(device));
  if (IsParamBuffer(name)) {
    return InvalidArgument("buffer '", name, "' is a resident parameter (read-only)");
  }
  auto it = buffers_.find(BufferKey(device, name));
  if (it != buffers_.end()) {
    if (dtype != kWireInvalid) {
      MS_ASSIGN_OR_RETURN(DType want, DTypeFromProto(dtype));
      if (want != it->second.tensor.dtype()) {
        return InvalidArgument("dtype mismatch: buffer '", name, "' on device ", device,
                               " is ", DTypeName(it->second.tensor.dtype()),
                               " but the step says ", DTypeName(want));
      }
    }
    return &it->second;
  }
  MS_ASSIGN_OR_RETURN(Box buffer_box, BoxFromIr(box), "buffer '", name, "'");
  if (dtype == kWireInvalid) {
    return InvalidArgument("buffer '", name, "' on device ", device,
                           " does not exist and the step gives no dtype to create it");
  }
  MS_ASSIGN_OR_RETURN(DType dt, DTypeFromProto(dtype), "buffer '", name, "'");
  MS_ASSIGN_OR_RETURN(BoxTensor created, BoxTensor::Create(dt, buffer_box));
  return &(buffers_[BufferKey(device, name)] = std::move(created));
}

absl::Status RequestRun::AddInputs(std::vector<SliceIr> inputs) {
  for (SliceIr& slice : inputs) {
    MS_RETURN_IF_ERROR(CheckDevice(slice.device), "input '", slice.name, "'");
    MS_ASSIGN_OR_RETURN(BoxTensor tensor, BoxTensorFromSlice(slice), "input");
    slice.data.clear();
    slice.data.shrink_to_fit();
    auto [it, inserted] =
        buffers_.try_emplace(BufferKey(slice.device, InputBuffer(slice.name)));
    if (!inserted) {
      return InvalidArgument("input '", slice.name, "' given twice for device ",
                             slice.device);
    }
    it->second = std::move(tensor);
  }
  return absl::OkStatus();
}

// Time in compute steps by op, on the worker's /metrics (op="dot_general" is
// its GEMM time).
Counter& ComputeSeconds() {
  static Counter* const seconds = &GlobalMetricRegistry().AddCounter(
      "meshserve_worker_compute_seconds_total",
      "Time in compute steps by op (op=\"dot_general\": the worker's GEMM time).", {"op"});
  return *seconds;
}
// Registered at start-up, so /metrics lists the family before the first step.
[[maybe_unused]] const Counter& registered_at_start = ComputeSeconds();

absl::Status RequestRun::Run(const ComputeStepIr& step) {
  std::vector<const BoxTensor*> inputs;
  for (const std::string& name : step.inputs) {
    MS_ASSIGN_OR_RETURN(const BoxTensor* input, Lookup(step.device, name));
    inputs.push_back(input);
  }
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  if (IsParamBuffer(step.output)) {
    return InvalidArgument("buffer '", step.output, "' is a resident parameter (read-only)");
  }
  const absl::Time start = absl::Now();
  MS_ASSIGN_OR_RETURN(BoxTensor result, RunComputeStep(step, inputs));
  ComputeSeconds().Increment({std::string(ComputeOpName(step.op))},
                             absl::ToDoubleSeconds(absl::Now() - start));
  buffers_[BufferKey(step.device, step.output)] = std::move(result);
  return absl::OkStatus();
}

absl::Status RequestRun::Run(const SendStepIr& step) {
  MS_ASSIGN_OR_RETURN(const BoxTensor* src, Lookup(step.device, step.buffer));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  OutgoingSlice slice;
  MS_ASSIGN_OR_RETURN(slice.bytes, ExtractBox(*src, box));
  const int64_t self = program_.worker >= 0 ? program_.worker : context_.worker_id;
  slice.dtype = DTypeToProto(src->tensor.dtype());
  if (step.dst_worker == self) {  // a local copy: no network
    return context_.rendezvous->DeliverSlice(request_id_, step.tag, std::move(slice.bytes),
                                             self, slice.dtype);
  }
  if (context_.transport == nullptr) {
    return Unavailable("no peer transport to reach worker ", step.dst_worker);
  }
  slice.request_id = request_id_;
  slice.tag = step.tag;
  slice.src_worker = self;
  slice.dst_worker = step.dst_worker;
  slice.dst_device = step.dst_device;
  slice.deadline = deadline_;
  sends_->Started();
  // The callback may run after this run ended: it holds only shared state and
  // the rendezvous (which outlives every transport callback).
  std::shared_ptr<SendTracker> tracker = sends_;
  Rendezvous* rendezvous = context_.rendezvous;
  std::string request_id = request_id_, tag = step.tag;
  const int64_t dst = step.dst_worker;
  pending_sends_.push_back(PeerTransport::Job{
      std::move(slice), [tracker, rendezvous, request_id, tag, dst](absl::Status status) {
        if (status.ok()) {
          tracker->Done(std::move(status));
          return;
        }
        status = AnnotateStatus(std::move(status), "send of tag '", tag, "' to worker ", dst);
        // Record the cause first, then fail this request's waiting receives
        // at once (RunProgram reports the recorded send error).
        tracker->Done(status);
        rendezvous->Cancel(request_id, status.message());
      }});
  return absl::OkStatus();
}

void RequestRun::FlushSends() {
  if (pending_sends_.empty()) return;
  std::vector<PeerTransport::Job> jobs;
  jobs.swap(pending_sends_);
  context_.transport->SendAll(std::move(jobs));
}

absl::Status RequestRun::Run(const RecvStepIr& step) {
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  MS_ASSIGN_OR_RETURN(Rendezvous::Received received,
                      context_.rendezvous->Receive(request_id_, step.tag, step.src_worker,
                                                   deadline_));
  MS_ASSIGN_OR_RETURN(BoxTensor * dst,
                      GetOrCreate(step.device, step.buffer, step.buffer_box, step.dtype));
  if (received.dtype != kWireInvalid) {
    MS_ASSIGN_OR_RETURN(DType sent, DTypeFromProto(received.dtype), "the sender's dtype");
    if (sent != dst->tensor.dtype()) {
      // E.g. a float32 partial sum reduced into a bfloat16 buffer.
      MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(sent, box.shape(), received.bytes),
                          "slice from worker ", step.src_worker);
      MS_ASSIGN_OR_RETURN(t, ConvertDType(t, dst->tensor.dtype()));
      return InsertBox(dst, box, t.bytes(), step.accumulate);
    }
  }
  return InsertBox(dst, box, received.bytes, step.accumulate);
}

absl::Status RequestRun::Run(const CopyStepIr& step) {
  MS_ASSIGN_OR_RETURN(const BoxTensor* src, Lookup(step.src_device, step.src));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  if (step.src_device == step.dst_device && step.src == step.dst) {
    return InvalidArgument("copy from a buffer onto itself");
  }
  const int dtype = step.dtype != kWireInvalid ? step.dtype : DTypeToProto(src->tensor.dtype());
  MS_ASSIGN_OR_RETURN(BoxTensor * dst,
                      GetOrCreate(step.dst_device, step.dst, step.dst_box, dtype));
  if (dst->tensor.dtype() != src->tensor.dtype()) {
    // Converted once per element (e.g. float32 partials into bfloat16).
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*src, box));
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(src->tensor.dtype(), box.shape(), bytes));
    MS_ASSIGN_OR_RETURN(t, ConvertDType(t, dst->tensor.dtype()));
    return InsertBox(dst, box, t.bytes(), step.accumulate);
  }
  return CopyBox(*src, dst, box, step.accumulate);
}

absl::Status RequestRun::Run(const FreeStepIr& step) {
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  // Freeing a buffer that does not exist on this device is a no-op: the
  // compiler frees a value on every device, and some never held a box.
  buffers_.erase(BufferKey(step.device, step.buffer));
  return absl::OkStatus();
}

absl::Status RequestRun::Run(const OutputStepIr& step) {
  MS_ASSIGN_OR_RETURN(const BoxTensor* src, Lookup(step.device, step.buffer));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  SliceIr out;
  MS_ASSIGN_OR_RETURN(out.data, ExtractBox(*src, box));
  out.name = step.output;
  out.device = step.device;
  out.box = BoxToIr(box);
  out.dtype = DTypeToProto(src->tensor.dtype());
  outputs_.push_back(std::move(out));
  return absl::OkStatus();
}

// Steps that run while sends queue up: local and quick, and none waits for a
// peer. The compiler interleaves a collective's sends with its local copies
// (an all-gather over 4 devices on each of 2 workers: copy, copy, send, copy,
// ...); flushing at every send opened one stream per send.
bool DefersFlush(const StepIr& step) {
  return std::holds_alternative<SendStepIr>(step) || std::holds_alternative<CopyStepIr>(step) ||
         std::holds_alternative<FreeStepIr>(step);
}

// The sends queued since the last flush go to the transport at once (one
// stream per peer) before any step that may wait for a peer or compute, and
// after the last step.
absl::Status RequestRun::RunSteps() {
  const std::vector<StepIr>& steps = program_.steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepIr& step = steps[i];
    // A request past its deadline stops between steps (receives wait only
    // until it); the coordinator's answer has gone or goes out now.
    absl::Status status =
        absl::Now() < deadline_
            ? std::visit(StepRunner{this}, step)
            : absl::DeadlineExceededError(absl::StrCat(
                  "request '", request_id_, "' passed its deadline before this step (",
                  steps.size() - i, " of ", steps.size(), " steps not run)"));
    if (!status.ok() || i + 1 == steps.size() || !DefersFlush(steps[i + 1])) {
      FlushSends();
    }
    MS_RETURN_IF_ERROR(status, "step ", i, " (", std::visit(StepName(), step), ")");
  }
  return absl::OkStatus();
}

// The buffer a step writes, creates or frees (device, name); none for sends
// and outputs, which only read.
bool Writes(const StepIr& step, int64_t device, const std::string& buffer) {
  if (const auto* s = std::get_if<ComputeStepIr>(&step)) {
    return s->device == device && s->output == buffer;
  }
  if (const auto* s = std::get_if<RecvStepIr>(&step)) {
    return s->device == device && s->buffer == buffer;
  }
  if (const auto* s = std::get_if<CopyStepIr>(&step)) {
    return s->dst_device == device && s->dst == buffer;
  }
  if (const auto* s = std::get_if<FreeStepIr>(&step)) {
    return s->device == device && s->buffer == buffer;
  }
  return false;
}

}  // namespace

std::vector<StepIr> ScheduleSends(std::vector<StepIr> steps) {
  std::vector<StepIr> out;
  out.reserve(steps.size());
  for (StepIr& step : steps) {
    const auto* send = std::get_if<SendStepIr>(&step);
    size_t at = out.size();
    if (send != nullptr) {
      // Back to the last step that writes the source; the earliest receive
      // after it is where the send goes (before it), so that no worker waits
      // for a peer that waits for it.
      for (size_t i = out.size(); i-- > 0;) {
        if (Writes(out[i], send->device, send->buffer)) break;
        if (std::holds_alternative<RecvStepIr>(out[i])) at = i;
      }
    }
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), std::move(step));
  }
  return out;
}

absl::StatusOr<std::vector<SliceIr>> RunProgram(const ProgramIr& program,
                                                const LoadedModel& model,
                                                absl::string_view request_id,
                                                std::vector<SliceIr> inputs,
                                                absl::Time deadline,
                                                const RunContext& context) {
  RequestRun run(program, model, request_id, deadline, context);
  MS_RETURN_IF_ERROR(run.AddInputs(std::move(inputs)));
  absl::Status steps = run.RunSteps();
  if (!steps.ok()) {
    // A failed send aborts the request's receives; report the cause.
    absl::Status send = run.SendError();
    return send.ok() ? steps : send;
  }
  MS_RETURN_IF_ERROR(run.WaitForSends());
  return run.TakeOutputs();
}

}  // namespace meshserve
