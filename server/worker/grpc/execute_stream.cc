#include "server/worker/grpc/execute_stream.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/program/decode_step_proto.h"
#include "common/program/program_proto.h"

namespace meshserve {

absl::StatusOr<absl::Duration> RequestTimeout(const ExecuteRequest& request, absl::Time now,
                                              absl::Time call_deadline) {
  absl::Time deadline = call_deadline;
  std::string which = "its call's deadline";
  if (request.deadline_ms() > 0) {
    deadline = std::min(deadline, now + absl::Milliseconds(request.deadline_ms()));
  }
  if (request.deadline_unix_us() > 0 &&
      absl::FromUnixMicros(request.deadline_unix_us()) < deadline) {
    deadline = absl::FromUnixMicros(request.deadline_unix_us());
    which = absl::StrCat("its deadline (deadline_unix_us ", request.deadline_unix_us(), ")");
  }
  if (deadline == absl::InfiniteFuture()) return absl::ZeroDuration();
  if (deadline <= now) {
    return absl::DeadlineExceededError(absl::StrCat(
        "request '", request.request_id(), "' arrived ", absl::FormatDuration(now - deadline),
        " past ", which, "; not run"));
  }
  return deadline - now;
}

void ExecuteMessage(WorkerEngine* engine, ExecuteRequest* request, ExecuteResponse* response,
                    std::function<void(absl::Status)> done, absl::Time call_deadline) {
  absl::StatusOr<absl::Duration> timeout =
      RequestTimeout(*request, absl::Now(), call_deadline);
  if (!timeout.ok()) return done(timeout.status());
  std::vector<SliceIr> inputs;
  inputs.reserve(request->inputs_size());
  for (TensorSlice& slice : *request->mutable_inputs()) inputs.push_back(SliceToIr(&slice));
  engine->ExecuteAsync(
      request->program_id(), request->request_id(), std::move(inputs),
      *timeout, request->param_version(),
      static_cast<ParamCacheMode>(request->param_cache()),
      [response, done = std::move(done)](absl::StatusOr<std::vector<SliceIr>> outputs) {
        if (!outputs.ok()) return done(outputs.status());
        for (SliceIr& out : *outputs) SliceFromIr(&out, response->add_outputs());
        done(absl::OkStatus());
      },
      request->has_decode()
          ? std::make_shared<const DecodeStepIr>(DecodeStepFromProto(request->decode()))
          : nullptr);
}

ExecuteStreamReactor::ExecuteStreamReactor(WorkerEngine* worker, Recorder record)
    : worker_(worker), record_(std::move(record)), reading_(std::make_unique<ExecuteRequest>()) {
  StartRead(reading_.get());
}

void ExecuteStreamReactor::OnReadDone(bool ok) {
  if (!ok) {  // the coordinator ended the stream, or it broke
    bool finish;
    {
      absl::MutexLock lock(&mu_);
      reads_ended_ = true;
      finish = FinishNowLocked();
    }
    if (finish) Finish(grpc::Status::OK);  // nothing of *this after: OnDone deletes it
    return;
  }
  std::shared_ptr<ExecuteRequest> request = std::move(reading_);
  auto reply = std::make_shared<ExecuteStreamReply>();
  reply->set_request_id(request->request_id());
  {
    absl::MutexLock lock(&mu_);
    ++running_;
  }
  reading_ = std::make_unique<ExecuteRequest>();
  StartRead(reading_.get());  // the next request may come while this one runs
  const absl::Time start = absl::Now();
  ExecuteResponse* response = reply->mutable_response();
  ExecuteMessage(worker_, request.get(), response,
                 [this, request, reply, start](absl::Status status) {
                   record_(start, status);
                   if (!status.ok()) {
                     reply->clear_response();
                     reply->set_code(static_cast<int>(status.code()));
                     reply->set_message(std::string(status.message()));
                   }
                   Enqueue(reply);
                 });
}

void ExecuteStreamReactor::Enqueue(std::shared_ptr<ExecuteStreamReply> reply) {
  const ExecuteStreamReply* write = nullptr;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    --running_;
    if (broken_) {
      finish = FinishNowLocked();
    } else {
      write = replies_.Push(std::move(reply));
    }
  }
  if (finish) Finish(grpc::Status::OK);
  if (write != nullptr) StartWrite(write);
}

void ExecuteStreamReactor::OnWriteDone(bool ok) {
  const ExecuteStreamReply* write = nullptr;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) broken_ = true;
    write = replies_.Done(ok);
    if (write == nullptr) finish = FinishNowLocked();
  }
  if (finish) Finish(grpc::Status::OK);
  if (write != nullptr) StartWrite(write);
}

bool ExecuteStreamReactor::FinishNowLocked() {
  if (finished_ || !reads_ended_ || running_ > 0 || replies_.writing()) return false;
  finished_ = true;
  return true;
}

}  // namespace meshserve
