#include "server/worker/execute_stream.h"

#include <utility>

#include "absl/time/clock.h"

namespace meshserve {

ExecuteStreamReactor::ExecuteStreamReactor(ShardWorker* worker, Recorder record)
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
  worker_->ExecuteAsync(request.get(), response,
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
