#include "server/coordinator/params/stage_sender.h"

#include <utility>

#include "common/base/status_util.h"

namespace meshserve {

StageSender::StageSender(int64_t worker, std::unique_ptr<StageParamsWriter> writer)
    : worker_(worker), writer_(std::move(writer)), thread_([this] { Run(); }) {}

StageSender::~StageSender() {
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    writer_->Cancel();  // a Write blocked on a stuck worker returns
    thread_.join();
  }
}

absl::Status StageSender::Enqueue(StageChunkIr chunk) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](StageSender* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->queue_.size() < kQueueChunks || !s->status_.ok();
      },
      this));
  if (!status_.ok()) return status_;
  queue_.push_back(std::move(chunk));
  return absl::OkStatus();
}

absl::Status StageSender::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  return status_;
}

void StageSender::Run() {
  for (;;) {
    StageChunkIr chunk;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StageSender* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return !s->queue_.empty() || s->closed_ || s->cancelled_;
          },
          this));
      if (cancelled_) return;
      if (queue_.empty()) break;  // closed and drained
      chunk = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status s = writer_->Write(std::move(chunk));
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      status_ = AnnotateStatus(s, "staging on worker ", worker_);
      queue_.clear();
      return;
    }
  }
  absl::Status s = writer_->Finish().status();
  absl::MutexLock lock(&mu_);
  if (!s.ok()) status_ = AnnotateStatus(s, "staging on worker ", worker_);
}

}  // namespace meshserve
