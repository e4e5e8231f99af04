// Coordinator::Infer: the retry loop, and one attempt (RunOnce): cut the
// inputs into each worker's call, run the calls on all workers at once, and
// assemble the outputs (see coordinator.h). Validation is in
// infer_request.cc and the program cache in program_cache.cc.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/calls_in_flight.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/fan_out.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

// Workers remember the ids of requests they ran (the rendezvous rejects a
// second run), so ids must not repeat when a coordinator restarts: each
// process numbers its requests under its own start time.
static const std::string& Incarnation() {
  static const std::string* const incarnation =
      new std::string(absl::StrCat(absl::Hex(absl::ToUnixMicros(absl::Now()))));
  return *incarnation;
}

std::string Coordinator::NextRequestId(const std::string& client_id) {
  return absl::StrCat("req", next_request_.fetch_add(1), ".", Incarnation(),
                      client_id.empty() ? "" : "-", client_id.substr(0, 64));
}

absl::StatusOr<InferResponse> Coordinator::Infer(const InferRequest& request) {
  absl::StatusOr<std::shared_ptr<const ModelFile>> model = ServableModel(request.model);
  if (model.ok() && request.variant != nullptr) model = request.variant;
  // Unknown names count under model="": a series per typo would grow unbounded.
  InferRecorder recorder(&metrics_, absl::IsNotFound(model.status()) ? "" : request.model,
                         request.id);
  absl::StatusOr<InferResponse> response =
      model.ok() ? InferOne(request, *std::move(model), /*may_batch=*/true, &recorder)
                 : absl::StatusOr<InferResponse>(model.status());
  if (response.ok() && response->batch_size > 0) {
    recorder.Batched(response->batch_size, response->queue_us, response->compute_us);
  }
  recorder.Finish(response.status());
  return response;
}

absl::StatusOr<InferResponse> Coordinator::InferOne(const InferRequest& request,
                                                    std::shared_ptr<const ModelFile> model,
                                                    bool may_batch, InferRecorder* recorder) {
  MS_ASSIGN_OR_RETURN(ValidatedRequest v, ValidateInferRequest(std::move(model), request));
  if (request.variant != nullptr) absl::StrAppend(&v.cache_key_suffix, "|", request.variant_key);
  // The budget counts from arrival; retries and every worker get what is left.
  const absl::Duration budget =
      request.timeout > absl::ZeroDuration() ? request.timeout : options_.execute_timeout;
  const absl::Time deadline = absl::Now() + budget;
  bool admitted = false;
  MS_ASSIGN_OR_RETURN(Batcher * batcher,
                      AdmitRequest(request.model, may_batch && request.decode == nullptr,
                                   &admitted));
  if (batcher != nullptr) return batcher->Infer(request, v, budget);
  absl::Cleanup release = [this, admitted, &request] {
    if (admitted) ReleaseInflight(request.model);
  };
  return RunAttempts(v, request, deadline, recorder, std::nullopt);
}

absl::StatusOr<Batcher*> Coordinator::AdmitRequest(const std::string& model, bool may_batch,
                                                   bool* admitted) {
  *admitted = false;
  if (!may_batch) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = batchers_.find(model);
  // The batcher lives as long as *this and bounds its own queue.
  if (it != batchers_.end()) return it->second.get();
  // An unbatched model's bound: requests in flight, admitted or rejected at once.
  int64_t& inflight = inflight_[model];
  if (inflight >= options_.max_inflight_per_model) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model '", model, "' has ", inflight,
                     " requests in flight, its limit (--max_inflight_per_model=",
                     options_.max_inflight_per_model, "); retry later"));
  }
  ++inflight;
  *admitted = true;
  return nullptr;
}

void Coordinator::ReleaseInflight(const std::string& model) {
  absl::MutexLock lock(&mu_);
  --inflight_[model];
}

absl::StatusOr<InferResponse> Coordinator::RunAttempts(const ValidatedRequest& v,
                                                       const InferRequest& request,
                                                       absl::Time deadline,
                                                       InferRecorder* recorder,
                                                       std::optional<AttemptResult> first) {
  absl::Status last;
  const int attempts = request.decode != nullptr ? 1 : 2;  // a step is not idempotent
  for (int attempt = 0; attempt < attempts; ++attempt) {
    AttemptResult now;
    if (attempt == 0 && first.has_value()) {
      now = *std::move(first);
    } else {
      now.placement = CurrentPlacement(request.model);
      if (now.placement == nullptr) {
        return Unavailable("model '", request.model, "' is not placed yet (waiting for ",
                           options_.min_workers, " workers)");
      }
      absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan =
          program_cache_.GetOrCompile(v, now.placement);
      now.response = plan.ok() ? RunOnce(v, request, *now.placement, **plan, deadline,
                                         &now.failed_worker, recorder)
                               : plan.status();
    }
    if (now.response.ok() || !absl::IsUnavailable(now.response.status()) ||
        attempt == attempts - 1) {
      return std::move(now.response);
    }
    last = now.response.status();
    // A worker failed. Inference is idempotent, so retry once: on the new
    // generation if the model moves soon (the control loop probes the suspect
    // and re-places without it), or on the same one if the probe finds the
    // worker alive (a transient failure, e.g. a worker that joined in this
    // generation and timed out dialling a peer). Give up when the worker is
    // still suspect and nothing moved within retry_wait or the deadline.
    const int64_t old_generation = now.placement->generation;
    const int64_t failed_worker = now.failed_worker;
    const absl::Time give_up = std::min(absl::Now() + options_.retry_wait, deadline);
    bool moved = false;
    bool alive = false;
    while (absl::Now() < give_up && !moved && !alive) {
      absl::SleepFor(absl::Milliseconds(20));
      std::shared_ptr<const Placement> placement = CurrentPlacement(request.model);
      moved = placement != nullptr && placement->generation != old_generation;
      alive = failed_worker >= 0 && registry_.IsAlive(failed_worker) &&
              !registry_.IsSuspect(failed_worker);
    }
    if (!moved && !alive) return last;
    MS_LOG(INFO) << "retrying request on model '" << request.model << "' ("
                 << (moved ? "new generation" : "worker alive") << ") after worker "
                 << failed_worker << " failed: " << last;
  }
  return last;
}

namespace {

// Extra time an Execute RPC gets past the request's deadline (see StartRun).
constexpr absl::Duration kRpcGrace = absl::Milliseconds(500);
// A worker's DEADLINE_EXCEEDED this close to the request's deadline is the request's.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

// The time left until `deadline`, at least 1 ms (a zero timeout means "none").
absl::Duration TimeLeft(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::Milliseconds(1));
}

int64_t SliceBytes(const std::vector<SliceIr>& slices) {
  int64_t n = 0;
  for (const SliceIr& s : slices) n += static_cast<int64_t>(s.data.size());
  return n;
}

// One Execute per worker with all of its input slices, cut from the request.
absl::StatusOr<std::map<int64_t, ExecuteCall>> BuildCalls(
    const CompiledPlan& plan, const std::map<std::string, const InferInput*>& inputs,
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
    const InferInput& in = *it->second;
    SliceIr slice;
    slice.name = s.input;
    slice.device = s.device;
    slice.box = BoxToIr(s.box);
    slice.dtype = DTypeToProto(in.dtype);
    slice.data.resize(static_cast<size_t>(s.box.NumElements() * DTypeSize(in.dtype)));
    // ValidateInferRequest checked in.data against in.shape; the box lies in it.
    MS_RETURN_IF_ERROR(ExtractBoxBytes(in.data.data(), in.shape, DTypeSize(in.dtype), s.box,
                                       slice.data.data()),
                       "input '", s.input, "'");
    auto call = calls.find(s.worker);
    if (call == calls.end()) {
      call = calls.emplace(s.worker, ExecuteCall{plan.program_id, request_id, {}, deadline_ms})
                 .first;
    }
    call->second.inputs.push_back(std::move(slice));
  }
  return calls;
}

// The bytes of the output pieces each worker returns under `plan`.
std::map<int64_t, int64_t> OutputBytesByWorker(const CompiledPlan& plan) {
  std::map<std::string, int64_t> elem;
  for (const PlanOutput& out : plan.outputs) elem[out.name] = DTypeSize(out.dtype);
  std::map<int64_t, int64_t> bytes;
  for (const OutputPiece& piece : plan.output_pieces) {
    bytes[piece.worker] += piece.box.NumElements() * elem[piece.output];
  }
  return bytes;
}

// Output `out` from one replica of each of its boxes (plan.output_pieces),
// written straight into the response's bytes.
absl::StatusOr<InferOutput> AssembleOutput(const PlanOutput& out, const CompiledPlan& plan,
                                           const std::map<int64_t, ExecuteResult>& by_worker) {
  InferOutput result;
  result.name = out.name;
  result.dtype = out.dtype;
  result.shape = out.shape;
  result.type_str = out.type_str;
  const int64_t elem = DTypeSize(out.dtype);
  result.data.resize(static_cast<size_t>(Box::FromShape(out.shape).NumElements() * elem));
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
      return Internal("worker ", piece.worker, " did not return output '", out.name,
                      "' box ", piece.box.ToString(), " of device ", piece.device);
    }
    if (found->dtype != DTypeToProto(out.dtype)) {
      return Internal("worker ", piece.worker, " returned output '", out.name,
                      "' with wire dtype ", found->dtype, ", expected ",
                      DTypeName(out.dtype));
    }
    const std::string where = absl::StrCat("worker ", piece.worker, " output '", out.name, "'");
    if (static_cast<int64_t>(found->data.size()) != piece.box.NumElements() * elem) {
      return InvalidArgument(where, ": ", found->data.size(), " bytes for box ",
                             piece.box.ToString(), ", expected ",
                             piece.box.NumElements() * elem);
    }
    MS_RETURN_IF_ERROR(InsertBoxBytes(result.data.data(), out.shape, elem, piece.box,
                                      found->data.data()),
                       where);
  }
  return result;
}

// The requested outputs of `plan`, assembled from the workers' results.
absl::StatusOr<InferResponse> AssembleResponse(const ValidatedRequest& v,
                                               const InferRequest& request,
                                               const Placement& placement,
                                               const CompiledPlan& plan,
                                               const std::map<int64_t, ExecuteResult>& by_worker) {
  InferResponse response;
  response.model = request.model;
  response.id = request.id;
  response.generation = placement.generation;
  for (const PlanOutput& out : plan.outputs) {
    if (std::find(v.outputs.begin(), v.outputs.end(), out.name) == v.outputs.end()) continue;
    MS_ASSIGN_OR_RETURN(InferOutput result, AssembleOutput(out, plan, by_worker));
    response.outputs.push_back(std::move(result));
  }
  return response;
}

}  // namespace

absl::StatusOr<InferResponse> Coordinator::RunOnce(const ValidatedRequest& v,
                                                   const InferRequest& request,
                                                   const Placement& placement,
                                                   const CompiledPlan& plan,
                                                   absl::Time deadline, int64_t* failed_worker,
                                                   InferRecorder* recorder, bool refill) {
  MS_ASSIGN_OR_RETURN(PendingRun run,
                      StartRun(v, request, placement, plan, deadline, refill, recorder));
  return FinishRun(std::move(run), v, request, placement, plan, deadline, failed_worker,
                   recorder);
}

absl::StatusOr<Coordinator::PendingRun> Coordinator::StartRun(
    const ValidatedRequest& v, const InferRequest& request, const Placement& placement,
    const CompiledPlan& plan, absl::Time deadline, bool refill, InferRecorder* recorder) {
  PendingRun run;
  run.request_id = NextRequestId(request.id);
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat("request ", run.request_id, " of model '",
                                                    request.model,
                                                    "': its deadline passed before it ran"));
  }
  MS_ASSIGN_OR_RETURN(auto calls,
                      BuildCalls(plan, v.inputs, run.request_id,
                                 absl::ToInt64Milliseconds(TimeLeft(deadline))));
  const int64_t version = request.param_version > 0 ? request.param_version : placement.version;
  run.param_cache = param_cache_.ModeFor(plan, version, refill);
  // A call is small by its bytes in and out (ExecuteCall::small).
  std::map<int64_t, int64_t> bytes_out = OutputBytesByWorker(plan);
  for (auto& [worker, call] : calls) {
    call.param_version = version;
    call.param_cache = run.param_cache;
    call.decode = request.decode;
    const int64_t bytes_in = SliceBytes(call.inputs);
    run.bytes_in += bytes_in;
    call.small = options_.small_call_bytes > 0 &&
                 bytes_in + bytes_out[worker] <= options_.small_call_bytes;
  }
  if (recorder != nullptr) recorder->ComputeStarted();
  run.compute_start = absl::Now();
  run.calls = std::make_shared<CallsInFlight>(calls.size());
  // Every call starts at once (WorkerClient::ExecuteAsync: gRPC's callback
  // API, no thread per call) and never waits behind another: the calls of one
  // request wait for each other's data. The RPC gets a little more than the
  // request's time, so that a worker's own DEADLINE_EXCEEDED (naming the
  // request and step) arrives first.
  const absl::Duration rpc_timeout = TimeLeft(deadline) + kRpcGrace;
  run.ids.reserve(calls.size());
  for (const auto& [id, call] : calls) run.ids.push_back(id);
  size_t next_index = 0;
  for (auto& [id, call] : calls) {
    const size_t index = next_index++;  // run.ids[index] == id: both in map order
    auto addr = placement.worker_addresses.find(id);
    absl::StatusOr<std::shared_ptr<WorkerClient>> client =
        addr == placement.worker_addresses.end()
            ? Internal("worker ", id, " outside the placement")
            : Client(id, addr->second);
    if (!client.ok()) {
      run.calls->Finish(index, client.status());
      continue;
    }
    // The callback holds the client and the calls: a call given up by
    // CallsInFlight::Wait finishes later on its own.
    WorkerClient* raw = client->get();
    raw->ExecuteAsync(std::move(call), rpc_timeout,
                      [calls = run.calls, index, keep = *std::move(client)](
                          absl::StatusOr<ExecuteResult> result) {
                        calls->Finish(index, std::move(result));
                      });
  }
  return run;
}

absl::StatusOr<InferResponse> Coordinator::FinishRun(PendingRun run, const ValidatedRequest& v,
                                                     const InferRequest& request,
                                                     const Placement& placement,
                                                     const CompiledPlan& plan,
                                                     absl::Time deadline,
                                                     int64_t* failed_worker,
                                                     InferRecorder* recorder) {
  absl::StatusOr<std::map<int64_t, ExecuteResult>> by_worker =
      CollectCalls(placement, run, deadline, failed_worker);
  const int64_t version = request.param_version > 0 ? request.param_version : placement.version;
  if (param_cache_.Ran(plan, version, run.param_cache, by_worker.status())) {
    return RunOnce(v, request, placement, plan, deadline, failed_worker, recorder, true);
  }
  MS_RETURN_IF_ERROR(by_worker.status());
  const absl::Duration compute = absl::Now() - run.compute_start;
  int64_t bytes_out = 0;
  for (const auto& [worker, result] : *by_worker) bytes_out += SliceBytes(result.outputs);
  if (recorder != nullptr) recorder->ComputeDone(run.bytes_in, bytes_out);
  MS_ASSIGN_OR_RETURN(InferResponse response,
                      AssembleResponse(v, request, placement, plan, *by_worker));
  response.compute_us = absl::ToInt64Microseconds(compute);
  return response;
}

absl::StatusOr<std::map<int64_t, ExecuteResult>> Coordinator::CollectCalls(
    const Placement& placement, const PendingRun& run, absl::Time deadline,
    int64_t* failed_worker) {
  const std::vector<int64_t>& ids = run.ids;
  int first_failed = -1;
  absl::Status first_status;
  const int abandoned = run.calls->Wait(
      ids, registry_,
      [&](int64_t failed) { CancelOthers(placement, ids, failed, run.request_id); },
      &first_failed, &first_status);
  // The first failure is the cause; the others mostly report the cancellation
  // it caused.
  if (first_failed < 0 && abandoned >= 0) {
    const int64_t worker = ids[abandoned];
    *failed_worker = worker;
    return Unavailable("worker ", worker, " (", placement.worker_addresses.at(worker),
                       ") was declared ", registry_.IsAlive(worker) ? "suspect" : "dead",
                       " while running request ", run.request_id,
                       "; its call was abandoned and its peers cancelled");
  }
  if (first_failed >= 0) {
    const int64_t worker = ids[first_failed];
    *failed_worker = worker;
    const std::string where = absl::StrCat("worker ", worker, " (",
                                           placement.worker_addresses.at(worker),
                                           ") failed request ", run.request_id);
    if (absl::IsDeadlineExceeded(first_status) &&
        absl::Now() + kDeadlineSlack >= deadline) {
      // The request's own deadline passed, not a lost worker: no suspect, no retry.
      return AnnotateStatus(first_status, where);
    }
    if (IsWorkerFailure(first_status)) {
      registry_.MarkSuspect(worker);
      return Unavailable(where, ": ", first_status.message());
    }
    return AnnotateStatus(first_status, where);
  }
  // Every call has returned (no failure, none given up).
  std::vector<absl::StatusOr<ExecuteResult>> results = run.calls->TakeResults();
  std::map<int64_t, ExecuteResult> by_worker;
  for (size_t i = 0; i < ids.size(); ++i) by_worker[ids[i]] = *std::move(results[i]);
  return by_worker;
}

void Coordinator::CancelOthers(const Placement& placement,
                               const std::vector<int64_t>& worker_ids, int64_t failed,
                               const std::string& request_id) {
  for (int64_t id : worker_ids) {
    if (id == failed) continue;
    auto addr = placement.worker_addresses.find(id);
    if (addr == placement.worker_addresses.end()) continue;
    auto client = Client(id, addr->second);
    if (client.ok()) {
      (*client)->Cancel(request_id, absl::StrCat("worker ", failed, " failed"),
                        options_.control_timeout).IgnoreError();
    }
  }
}

}  // namespace meshserve
