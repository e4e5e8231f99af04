// Coordinator::Infer: the retry loop, and one attempt (RunOnce): cut the
// inputs into each worker's call, run the calls on all workers at once, and
// assemble the outputs (see coordinator.h). Validation is in
// infer_request.cc and the program cache in program_cache.cc.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {

std::string Coordinator::NextRequestId(const std::string& client_id) {
  return absl::StrCat("req", next_request_.fetch_add(1),
                      client_id.empty() ? "" : "-", client_id.substr(0, 64));
}

absl::StatusOr<InferResponse> Coordinator::Infer(const InferRequest& request) {
  absl::StatusOr<std::shared_ptr<const ModelFile>> model = ServableModel(request.model);
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
  Batcher* batcher = nullptr;
  if (may_batch) {
    absl::MutexLock lock(&mu_);
    auto it = batchers_.find(request.model);
    if (it != batchers_.end()) batcher = it->second.get();  // lives as long as *this
  }
  if (batcher != nullptr) {
    return batcher->Infer(request, v,
                          request.timeout > absl::ZeroDuration() ? request.timeout
                                                                 : options_.execute_timeout);
  }
  absl::Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<const Placement> placement = CurrentPlacement(request.model);
    if (placement == nullptr) {
      return Unavailable("model '", request.model, "' is not placed yet (waiting for ",
                         options_.min_workers, " workers)");
    }
    int64_t failed_worker = -1;
    absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan =
        program_cache_.GetOrCompile(v, placement);
    absl::StatusOr<InferResponse> response =
        plan.ok() ? RunOnce(v, request, *placement, **plan, &failed_worker, recorder)
                  : plan.status();
    if (response.ok() || !absl::IsUnavailable(response.status()) || attempt == 1) {
      return response;
    }
    last = response.status();
    // A worker failed. Inference is idempotent, so retry once: on the new
    // generation if the model moves soon (the control loop probes the suspect
    // and re-places without it), or on the same one if the probe finds the
    // worker alive (a transient failure, e.g. a worker that joined in this
    // generation and timed out dialling a peer). Give up when the worker is
    // still suspect and nothing moved within retry_wait.
    const int64_t old_generation = placement->generation;
    const absl::Time give_up = absl::Now() + options_.retry_wait;
    bool moved = false;
    bool alive = false;
    while (absl::Now() < give_up && !moved && !alive) {
      absl::SleepFor(absl::Milliseconds(20));
      std::shared_ptr<const Placement> now = CurrentPlacement(request.model);
      moved = now != nullptr && now->generation != old_generation;
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

int64_t SliceBytes(const std::vector<SliceIr>& slices) {
  int64_t n = 0;
  for (const SliceIr& s : slices) n += static_cast<int64_t>(s.data.size());
  return n;
}

// One Execute per worker with all of its input slices, cut from the request.
absl::StatusOr<std::map<int64_t, ExecuteCall>> BuildCalls(
    const CompiledPlan& plan, const std::map<std::string, const InferInput*>& inputs,
    const std::string& request_id, absl::Duration timeout) {
  std::map<int64_t, ExecuteCall> calls;
  for (const auto& [worker, program] : plan.programs) {
    ExecuteCall& call = calls[worker];
    call.program_id = plan.program_id;
    call.request_id = request_id;
    call.deadline_ms = absl::ToInt64Milliseconds(timeout);
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
      call = calls.emplace(s.worker, ExecuteCall{plan.program_id, request_id, {},
                                                 absl::ToInt64Milliseconds(timeout)})
                 .first;
    }
    call->second.inputs.push_back(std::move(slice));
  }
  return calls;
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
                                                   int64_t* failed_worker,
                                                   InferRecorder* recorder) {
  const std::string request_id = NextRequestId(request.id);
  const absl::Duration timeout =
      request.timeout > absl::ZeroDuration() ? request.timeout : options_.execute_timeout;
  MS_ASSIGN_OR_RETURN(auto calls, BuildCalls(plan, v.inputs, request_id, timeout));
  for (auto& [worker, call] : calls) call.param_version = placement.version;
  int64_t bytes_in = 0;
  for (const auto& [worker, call] : calls) bytes_in += SliceBytes(call.inputs);
  if (recorder != nullptr) recorder->ComputeStarted();
  const absl::Time compute_start = absl::Now();
  MS_ASSIGN_OR_RETURN(auto by_worker, ExecuteAll(placement, request_id, timeout,
                                                 std::move(calls), failed_worker));
  const absl::Duration compute = absl::Now() - compute_start;
  int64_t bytes_out = 0;
  for (const auto& [worker, result] : by_worker) bytes_out += SliceBytes(result.outputs);
  if (recorder != nullptr) recorder->ComputeDone(bytes_in, bytes_out);
  MS_ASSIGN_OR_RETURN(InferResponse response,
                      AssembleResponse(v, request, placement, plan, by_worker));
  response.compute_us = absl::ToInt64Microseconds(compute);
  return response;
}

absl::StatusOr<std::map<int64_t, ExecuteResult>> Coordinator::ExecuteAll(
    const Placement& placement, const std::string& request_id, absl::Duration timeout,
    std::map<int64_t, ExecuteCall> calls, int64_t* failed_worker) {
  std::vector<int64_t> ids;
  for (const auto& [id, call] : calls) ids.push_back(id);
  // The first worker whose Execute fails cancels the request on every other
  // worker at once, so peers blocked on a receive from it return now instead of
  // at the deadline.
  absl::Mutex cancel_mu;
  int64_t first_failed = -1;  // guarded by cancel_mu
  std::vector<absl::StatusOr<ExecuteResult>> results =
      ParallelCall(ids, [&](int64_t id) -> absl::StatusOr<ExecuteResult> {
        auto addr = placement.worker_addresses.find(id);
        absl::StatusOr<std::shared_ptr<WorkerClient>> client =
            addr == placement.worker_addresses.end()
                ? Internal("worker ", id, " outside the placement")
                : Client(id, addr->second);
        // Each call moves its own ExecuteCall out (the map itself is not modified).
        absl::StatusOr<ExecuteResult> result =
            client.ok() ? (*client)->Execute(std::move(calls.at(id)), timeout) : client.status();
        if (!result.ok()) {
          bool first = false;
          {
            absl::MutexLock lock(&cancel_mu);
            first = first_failed < 0;
            if (first) first_failed = id;
          }
          if (first) CancelOthers(placement, ids, id, request_id);
        }
        return result;
      });
  // The first failure is the cause; the others mostly report the cancellation
  // it caused. (Every call has returned: first_failed is no longer written.)
  if (first_failed >= 0) {
    const int64_t worker = first_failed;
    const absl::Status s =
        results[std::find(ids.begin(), ids.end(), worker) - ids.begin()].status();
    *failed_worker = worker;
    const std::string where = absl::StrCat("worker ", worker, " (",
                                           placement.worker_addresses.at(worker),
                                           ") failed request ", request_id);
    if (IsWorkerFailure(s)) {
      registry_.MarkSuspect(worker);
      return Unavailable(where, ": ", s.message());
    }
    return AnnotateStatus(s, where);
  }
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
