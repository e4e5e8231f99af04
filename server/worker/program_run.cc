// RunProgramAsync (program_run.h): one request's run of a program on this worker
// (ProgramRunner::ExecuteAsync).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/compute_step.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/worker/send_tracker.h"
#include "server/worker/program_run.h"
#include "server/worker/program_steps.h"

namespace meshserve {
namespace {

// One request's run. It owns itself while it runs: a waiter in the rendezvous
// (a receive that found no slice yet), a send tracker's callback or the
// caller holds the shared_ptr; the timer's entry holds a weak one.
class RequestRun : public std::enable_shared_from_this<RequestRun> {
 public:
  RequestRun(std::shared_ptr<const InstalledProgram> program,
             std::shared_ptr<const LoadedModel> model, std::string request_id,
             absl::Time deadline, RunContext context, RunDone done)
      : program_(std::move(program)),
        model_(*model),
        model_ref_(std::move(model)),
        request_id_(std::move(request_id)),
        deadline_(deadline),
        context_(std::move(context)),
        done_(std::move(done)),
        sends_(std::make_shared<SendTracker>()) {}

  // Adds the inputs, arms the deadline and runs (see RunProgramAsync).
  void Start(std::vector<SliceIr> inputs);

 private:
  using BufferKey = RunBufferKey;

  // Runs the steps from next_ until the end (then Finish once the sends are
  // done) or until a receive waits; returns the thread either way.
  void Continue();
  // A receive's waiter ran: continue here or on the executor.
  void Resume();
  // The deadline timer's entry: ends a wait on a receive or on the sends.
  void OnDeadline();
  // Calls done_ (a failed send's error before the step error it caused).
  void Finish(absl::Status status);
  // The receive step: true when its slice was there, false when a waiter
  // was left (the run must return its thread at once).
  absl::StatusOr<bool> TryRun(const RecvStepIr& step);

  absl::Status CheckDevice(int64_t device) const { return CheckHostsDevice(model_, device); }
  // A param slice not copied (slices_) is copied here: a step reads it.
  absl::StatusOr<const BoxTensor*> Lookup(int64_t device, const std::string& name);
  // The bytes (row-major) of `box` of buffer `name` on `device`, with the box
  // and the buffer's dtype: what a send or an output step carries.
  struct Extracted {
    Box box;
    std::string bytes;
    DType dtype = DType::kFloat32;
  };
  absl::StatusOr<Extracted> Extract(int64_t device, const std::string& name, const BoxIr& box);
  // A copy whose destination is read in place (ParamSliceOf) instead of made.
  std::optional<ParamSlice> InPlace(const StepIr& step);
  // The buffer (device, name), created zero-filled with box/dtype when absent.
  absl::StatusOr<BoxTensor*> GetOrCreate(int64_t device, const std::string& name,
                                         const BoxIr& box, std::optional<DType> dtype);

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
  absl::Status Run(const RecvStepIr&) { return absl::OkStatus(); }  // TryRun
  absl::Status Run(const CopyStepIr& step);
  absl::Status Run(const FreeStepIr& step);
  absl::Status Run(const OutputStepIr& step);
  // Hands the sends queued since the last flush to the transport at once.
  void FlushSends();
  // A kFill run that succeeded: its kept buffers go to the model version.
  void KeepParamOnlyBuffers();

  const std::shared_ptr<const InstalledProgram> program_;
  const LoadedModel& model_;
  const std::shared_ptr<const LoadedModel> model_ref_;  // keeps the version
  const std::string request_id_;
  const absl::Time deadline_;
  const RunContext context_;
  RunDone done_;
  std::shared_ptr<SendTracker> sends_;
  size_t next_ = 0;  // the next step to run
  absl::Duration compute_;  // in compute steps so far
  DeadlineTimer::Id timer_id_ = 0;
  // node_hash_map: pointers to buffers stay valid while others are created.
  absl::node_hash_map<BufferKey, BoxTensor> buffers_;
  std::vector<SliceIr> outputs_;
  // Remote sends queued since the last flush (Continue; peer_transport.h).
  std::vector<PeerTransport::Job> pending_sends_;
  KeptBuffers kept_;  // a kFill run's kept buffers, taken at their free
  // Copies of a param's slice not made: a dot_general reads them in place.
  absl::flat_hash_map<BufferKey, ParamSlice> slices_;
};

absl::StatusOr<RequestRun::Extracted> RequestRun::Extract(int64_t device, const std::string& name,
                                                          const BoxIr& box) {
  MS_ASSIGN_OR_RETURN(const BoxTensor* src, Lookup(device, name));
  Extracted out;
  MS_ASSIGN_OR_RETURN(out.box, BoxFromIr(box));
  MS_ASSIGN_OR_RETURN(out.bytes, ExtractBox(*src, out.box));
  out.dtype = src->tensor.dtype();
  return out;
}

absl::StatusOr<const BoxTensor*> RequestRun::Lookup(int64_t device, const std::string& name) {
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
  if (it != buffers_.end()) return &it->second;
  if (auto slice = slices_.find(BufferKey(device, name)); slice != slices_.end()) {
    MS_ASSIGN_OR_RETURN(BoxTensor copied, CopyParamSlice(slice->second));
    slices_.erase(slice);
    return &(buffers_[BufferKey(device, name)] = std::move(copied));
  }
  if (context_.kept != nullptr) {  // a kUse run: what the kFill run kept
    auto kept = context_.kept->find(BufferKey(device, name));
    if (kept != context_.kept->end()) return &kept->second;
  }
  return NotFound("unknown buffer '", name, "' on device ", device);
}

absl::StatusOr<BoxTensor*> RequestRun::GetOrCreate(int64_t device, const std::string& name,
                                                   const BoxIr& box,
                                                   std::optional<DType> dtype) {
  MS_RETURN_IF_ERROR(CheckDevice(device));
  if (IsParamBuffer(name)) {
    return InvalidArgument("buffer '", name, "' is a resident parameter (read-only)");
  }
  if (slices_.contains(BufferKey(device, name))) MS_RETURN_IF_ERROR(Lookup(device, name).status());
  auto it = buffers_.find(BufferKey(device, name));
  if (it != buffers_.end()) {
    if (dtype.has_value() && *dtype != it->second.tensor.dtype()) {
      return InvalidArgument("dtype mismatch: buffer '", name, "' on device ", device, " is ",
                             DTypeName(it->second.tensor.dtype()), " but the step says ",
                             DTypeName(*dtype));
    }
    return &it->second;
  }
  MS_ASSIGN_OR_RETURN(Box buffer_box, BoxFromIr(box), "buffer '", name, "'");
  if (!dtype.has_value()) {
    return InvalidArgument("buffer '", name, "' on device ", device,
                           " does not exist and the step gives no dtype to create it");
  }
  MS_ASSIGN_OR_RETURN(BoxTensor created, BoxTensor::Create(*dtype, buffer_box));
  return &(buffers_[BufferKey(device, name)] = std::move(created));
}

absl::Status RequestRun::Run(const ComputeStepIr& step) {
  std::vector<const BoxTensor*> inputs;
  const ParamSlice* rhs_in_place = nullptr;  // input 1 read in place
  for (const std::string& name : step.inputs) {
    auto slice = slices_.find(BufferKey(step.device, name));
    if (ReadsInPlace(step, inputs.size()) && slice != slices_.end()) {
      rhs_in_place = &slice->second;
      inputs.push_back(nullptr);
      continue;
    }
    MS_ASSIGN_OR_RETURN(const BoxTensor* input, Lookup(step.device, name));
    inputs.push_back(input);
  }
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  if (IsParamBuffer(step.output)) {
    return InvalidArgument("buffer '", step.output, "' is a resident parameter (read-only)");
  }
  const absl::Time start = absl::Now();
  MS_ASSIGN_OR_RETURN(BoxTensor result, RunComputeStep(step, inputs, context_.decode.get(),
                                                           rhs_in_place));
  const absl::Duration took = absl::Now() - start;
  compute_ += took;
  ComputeSeconds().Increment({std::string(ComputeOpName(step.op))},
                             absl::ToDoubleSeconds(took));
  slices_.erase(BufferKey(step.device, step.output));
  buffers_[BufferKey(step.device, step.output)] = std::move(result);
  return absl::OkStatus();
}

absl::Status RequestRun::Run(const SendStepIr& step) {
  const int64_t self = program_->ir.worker >= 0 ? program_->ir.worker : context_.worker_id;
  MS_ASSIGN_OR_RETURN(Extracted part, Extract(step.device, step.buffer, step.box));
  OutgoingSlice slice;
  slice.bytes = std::move(part.bytes);
  slice.dtype = part.dtype;
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

absl::StatusOr<bool> RequestRun::TryRun(const RecvStepIr& step) {
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  MS_ASSIGN_OR_RETURN(
      std::optional<Rendezvous::Received> got,
      context_.rendezvous->TryReceive(request_id_, step.tag, step.src_worker, deadline_,
                                      [this]() -> Rendezvous::Ready {
                                        return [self = shared_from_this()]() { self->Resume(); };
                                      }));
  if (!got.has_value()) return false;
  Rendezvous::Received& received = *got;
  MS_ASSIGN_OR_RETURN(BoxTensor * dst,
                      GetOrCreate(step.device, step.buffer, step.buffer_box, step.dtype));
  // The sender's dtype, e.g. float32 partial sums into a bfloat16 buffer.
  const DType sent = received.dtype.value_or(dst->tensor.dtype());
  MS_RETURN_IF_ERROR(InsertConverted(dst, box, sent, received.bytes, step.accumulate),
                     "slice from worker ", step.src_worker);
  return true;
}

absl::Status RequestRun::Run(const CopyStepIr& step) {
  MS_ASSIGN_OR_RETURN(const BoxTensor* src, Lookup(step.src_device, step.src));
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(step.box));
  if (step.src_device == step.dst_device && step.src == step.dst) {
    return InvalidArgument("copy from a buffer onto itself");
  }
  if (std::optional<ParamSlice> slice = InPlace(step)) {
    slices_[BufferKey(step.dst_device, step.dst)] = *std::move(slice);
    return absl::OkStatus();
  }
  const DType dtype = step.dtype.value_or(src->tensor.dtype());
  MS_ASSIGN_OR_RETURN(BoxTensor * dst,
                      GetOrCreate(step.dst_device, step.dst, step.dst_box, dtype));
  if (dst->tensor.dtype() == src->tensor.dtype()) return CopyBox(*src, dst, box, step.accumulate);
  MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*src, box));
  return InsertConverted(dst, box, src->tensor.dtype(), bytes, step.accumulate);
}

absl::Status RequestRun::Run(const FreeStepIr& step) {
  MS_RETURN_IF_ERROR(CheckDevice(step.device));
  slices_.erase(BufferKey(step.device, step.buffer));
  // Freeing a buffer that does not exist on this device is a no-op: the
  // compiler frees a value on every device, and some never held a box.
  auto it = buffers_.find(BufferKey(step.device, step.buffer));
  if (it == buffers_.end()) return absl::OkStatus();
  if (context_.param_cache == ParamCacheMode::kFill &&
      program_->param_only.kept.contains(it->first)) {
    kept_.emplace(it->first, std::move(it->second));  // Finish keeps it with the version
  }
  buffers_.erase(it);
  return absl::OkStatus();
}

absl::Status RequestRun::Run(const OutputStepIr& step) {
  MS_ASSIGN_OR_RETURN(Extracted part, Extract(step.device, step.buffer, step.box));
  SliceIr out;
  out.data = std::move(part.bytes);
  out.name = step.output;
  out.device = step.device;
  out.box = BoxToIr(part.box);
  out.dtype = part.dtype;
  outputs_.push_back(std::move(out));
  return absl::OkStatus();
}

// The sends queued since the last flush go to the transport at once (one
// stream per peer) before any step that may wait for a peer or compute, and
// after the last step. A receive that waits leaves the thread right after
// TryReceive: its waiter may already be running the next steps elsewhere.
void RequestRun::Continue() {
  const std::vector<StepIr>& steps = program_->ir.steps;
  while (next_ < steps.size()) {
    const size_t i = next_;
    const StepIr& step = steps[i];
    if (context_.param_cache == ParamCacheMode::kUse && program_->param_only.marked[i] &&
        !InPlace(step).has_value()) {
      // Made by a kFill run: context_.kept. Sends queued before it still go
      // out before a receive (else both sides of an all-gather waited).
      if (i + 1 == steps.size() || !DefersFlush(steps[i + 1])) FlushSends();
      ++next_;
      continue;
    }
    absl::Status status;
    if (const auto* recv = std::get_if<RecvStepIr>(&step)) {
      FlushSends();  // never wait with sends queued: the peer may wait for them
      // TryReceive keeps the deadline itself (its error names the slice).
      absl::StatusOr<bool> received = TryRun(*recv);
      if (received.ok() && !*received) return;  // the waiter continues
      status = received.status();
    } else if (const absl::Time now = absl::Now(); now >= deadline_) {
      // A request past its deadline stops between steps; the coordinator's
      // answer has gone or goes out now.
      status = absl::DeadlineExceededError(absl::StrCat(
          "request '", request_id_, "' passed its deadline ", absl::FormatDuration(now - deadline_),
          " ago, before this step (", steps.size() - i, " of ", steps.size(), " steps not run)"));
    } else {
      status = std::visit(StepRunner{this}, step);
    }
    if (!status.ok() || i + 1 == steps.size() || !DefersFlush(steps[i + 1])) {
      FlushSends();
    }
    if (!status.ok()) {
      Finish(AnnotateStatus(status, "step ", i, " (", DescribeStep(step), ")"));
      return;
    }
    ++next_;
  }
  program_->last_compute_ns.store(absl::ToInt64Nanoseconds(compute_));
  sends_->WhenDone(deadline_,
                   [self = shared_from_this()](absl::Status sent) { self->Finish(sent); });
}

std::optional<ParamSlice> RequestRun::InPlace(const StepIr& step) {
  const auto* copy = std::get_if<CopyStepIr>(&step);
  if (copy == nullptr || !IsParamBuffer(copy->src) ||
      buffers_.contains(BufferKey(copy->dst_device, copy->dst))) {
    return std::nullopt;
  }
  absl::StatusOr<const BoxTensor*> src = Lookup(copy->src_device, copy->src);
  return src.ok() ? ParamSliceOf(*copy, **src) : std::nullopt;
}

void RequestRun::KeepParamOnlyBuffers() {
  for (const RunBufferKey& key : program_->param_only.kept) {
    auto it = buffers_.find(key);
    if (it == buffers_.end()) continue;
    kept_.emplace(it->first, std::move(it->second));
    buffers_.erase(it);
  }
  model_.kept_params.Keep(program_->cache_key,
                          std::make_shared<const KeptBuffers>(std::move(kept_)));
}

void RequestRun::Resume() {
  if (context_.executor == nullptr) {
    Continue();
    return;
  }
  context_.executor([self = shared_from_this()]() { self->Continue(); });
}

void RequestRun::OnDeadline() {
  // With the waiter gone no slice resumes the run: this does, and its
  // receive reports the deadline.
  if (context_.rendezvous->RemoveWaiter(request_id_)) {
    Resume();
    return;
  }
  sends_->Expire();
}

void RequestRun::Finish(absl::Status status) {
  context_.timer->Remove(timer_id_);
  if (!status.ok()) {
    // A failed send aborts the request's receives; report the cause.
    absl::Status send = sends_->first_error();
    if (!send.ok()) status = std::move(send);
  }
  RunDone done = std::move(done_);
  if (status.ok() && context_.param_cache == ParamCacheMode::kFill) KeepParamOnlyBuffers();
  if (status.ok()) {
    done(std::move(outputs_));
  } else {
    done(std::move(status));
  }
}

void RequestRun::Start(std::vector<SliceIr> inputs) {
  if (absl::Status added = AddInputBuffers(model_, std::move(inputs), &buffers_); !added.ok()) {
    return std::move(done_)(std::move(added));
  }
  std::weak_ptr<RequestRun> weak = weak_from_this();
  timer_id_ = context_.timer->Add(deadline_, [weak]() {
    if (std::shared_ptr<RequestRun> self = weak.lock()) self->OnDeadline();
  });
  Continue();
}

}  // namespace

void RunProgramAsync(std::shared_ptr<const InstalledProgram> program,
                     std::shared_ptr<const LoadedModel> model, std::string request_id,
                     std::vector<SliceIr> inputs, absl::Time deadline, RunContext context,
                     RunDone done) {
  auto run = std::make_shared<RequestRun>(std::move(program), std::move(model),
                                          std::move(request_id), deadline, std::move(context),
                                          std::move(done));
  run->Start(std::move(inputs));
}

}  // namespace meshserve
