// InferPipeline (infer_pipeline.h): one attempt of a request. StartRun cuts
// the inputs into each worker's call (infer_calls.h) and starts the calls on
// all workers at once; FinishRun collects them (the first failure cancels the
// others, a lost worker's call is abandoned) and assembles the outputs.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/coordinator/calls_in_flight.h"
#include "server/coordinator/fan_out.h"
#include "server/coordinator/infer_calls.h"
#include "server/coordinator/infer_pipeline.h"

namespace meshserve {
namespace {

// Extra time an Execute RPC gets past the request's deadline (see StartRun).
constexpr absl::Duration kRpcGrace = absl::Milliseconds(500);
// A worker's DEADLINE_EXCEEDED this close to the request's deadline is the request's.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

// The time left until `deadline`, at least 1 ms (a zero timeout means "none").
absl::Duration TimeLeft(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::Milliseconds(1));
}

}  // namespace

// Workers remember the ids of requests they ran (the rendezvous rejects a
// second run), so ids must not repeat when a coordinator restarts: each
// process numbers its requests under its own start time.
static const std::string& Incarnation() {
  static const std::string* const incarnation =
      new std::string(absl::StrCat(absl::Hex(absl::ToUnixMicros(absl::Now()))));
  return *incarnation;
}

std::string InferPipeline::NextRequestId(const std::string& client_id) {
  return absl::StrCat("req", next_request_.fetch_add(1), ".", Incarnation(),
                      client_id.empty() ? "" : "-", client_id.substr(0, 64));
}

absl::StatusOr<InferResponse> InferPipeline::RunOnce(const ValidatedRequest& v,
                                                     const InferRequest& request,
                                                     const Placement& placement,
                                                     const CompiledPlan& plan, absl::Time deadline,
                                                     int64_t* failed_worker,
                                                     InferRecorder* recorder, bool refill) {
  MS_ASSIGN_OR_RETURN(PendingRun run,
                      StartRun(v, request, placement, plan, deadline, refill, recorder));
  return FinishRun(std::move(run), v, request, placement, plan, deadline, failed_worker, recorder);
}

absl::StatusOr<InferPipeline::PendingRun> InferPipeline::StartRun(
    const ValidatedRequest& v, const InferRequest& request, const Placement& placement,
    const CompiledPlan& plan, absl::Time deadline, bool refill, InferRecorder* recorder) {
  PendingRun run;
  run.request_id = NextRequestId(request.id);
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat("request ", run.request_id, " of model '",
                                                    request.model,
                                                    "': its deadline passed before it ran"));
  }
  MS_ASSIGN_OR_RETURN(auto calls, BuildCalls(plan, v.inputs, run.request_id,
                                             absl::ToInt64Milliseconds(TimeLeft(deadline))));
  const int64_t version = request.param_version > 0 ? request.param_version : placement.version;
  run.param_cache = param_cache_->ModeFor(plan, version, refill);
  // A call is small by its bytes in and out (ExecuteCall::small).
  std::map<int64_t, int64_t> bytes_out = OutputBytesByWorker(plan);
  for (auto& [worker, call] : calls) {
    call.param_version = version;
    call.param_cache = run.param_cache;
    call.decode = request.decode;
    const int64_t bytes_in = SliceBytes(call.inputs);
    run.bytes_in += bytes_in;
    call.small =
        options_.small_call_bytes > 0 && bytes_in + bytes_out[worker] <= options_.small_call_bytes;
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
        addr == placement.worker_addresses.end() ? Internal("worker ", id, " outside the placement")
                                                 : connections_->Get(id, addr->second);
    if (!client.ok()) {
      run.calls->Finish(index, client.status());
      continue;
    }
    // The callback holds the client and the calls: a call given up by
    // CallsInFlight::Wait finishes later on its own.
    WorkerClient* raw = client->get();
    raw->ExecuteAsync(
        std::move(call), rpc_timeout,
        [calls = run.calls, index, keep = *std::move(client)](
            absl::StatusOr<ExecuteResult> result) { calls->Finish(index, std::move(result)); });
  }
  return run;
}

absl::StatusOr<InferResponse> InferPipeline::FinishRun(PendingRun run, const ValidatedRequest& v,
                                                       const InferRequest& request,
                                                       const Placement& placement,
                                                       const CompiledPlan& plan,
                                                       absl::Time deadline, int64_t* failed_worker,
                                                       InferRecorder* recorder) {
  absl::StatusOr<std::map<int64_t, ExecuteResult>> by_worker =
      CollectCalls(placement, run, deadline, failed_worker);
  const int64_t version = request.param_version > 0 ? request.param_version : placement.version;
  if (param_cache_->Ran(plan, version, run.param_cache, by_worker.status())) {
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

absl::StatusOr<std::map<int64_t, ExecuteResult>> InferPipeline::CollectCalls(
    const Placement& placement, const PendingRun& run, absl::Time deadline,
    int64_t* failed_worker) {
  const std::vector<int64_t>& ids = run.ids;
  int first_failed = -1;
  absl::Status first_status;
  const int abandoned = run.calls->Wait(
      ids, *registry_,
      [&](int64_t failed) { CancelOthers(placement, ids, failed, run.request_id); }, &first_failed,
      &first_status);
  // The first failure is the cause; the others mostly report the cancellation
  // it caused.
  if (first_failed < 0 && abandoned >= 0) {
    const int64_t worker = ids[abandoned];
    *failed_worker = worker;
    return Unavailable("worker ", worker, " (", placement.worker_addresses.at(worker),
                       ") was declared ", registry_->IsAlive(worker) ? "suspect" : "dead",
                       " while running request ", run.request_id,
                       "; its call was abandoned and its peers cancelled");
  }
  if (first_failed >= 0) {
    const int64_t worker = ids[first_failed];
    *failed_worker = worker;
    const std::string where =
        absl::StrCat("worker ", worker, " (", placement.worker_addresses.at(worker),
                     ") failed request ", run.request_id);
    if (absl::IsDeadlineExceeded(first_status) && absl::Now() + kDeadlineSlack >= deadline) {
      // The request's own deadline passed, not a lost worker: no suspect, no retry.
      return AnnotateStatus(first_status, where);
    }
    if (IsWorkerFailure(first_status)) {
      registry_->MarkSuspect(worker);
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

void InferPipeline::CancelOthers(const Placement& placement, const std::vector<int64_t>& worker_ids,
                                 int64_t failed, const std::string& request_id) {
  for (int64_t id : worker_ids) {
    if (id == failed) continue;
    auto addr = placement.worker_addresses.find(id);
    if (addr == placement.worker_addresses.end()) continue;
    auto client = connections_->Get(id, addr->second);
    if (client.ok()) {
      (*client)
          ->Cancel(request_id, absl::StrCat("worker ", failed, " failed"), options_.control_timeout)
          .IgnoreError();
    }
  }
}

}  // namespace meshserve
