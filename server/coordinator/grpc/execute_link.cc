#include "server/coordinator/grpc/execute_link.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/elastic_executor.h"
#include "common/program/program_proto.h"

namespace meshserve {
namespace {

// One timer thread for every link's deadlines (never destroyed: a link may
// outlive static destruction's order).
DeadlineTimer& Timer() {
  static DeadlineTimer* const timer = new DeadlineTimer();
  return *timer;
}

}  // namespace

ExecuteResult TakeExecuteResult(ExecuteResponse* response) {
  ExecuteResult result;
  result.outputs.reserve(response->outputs_size());
  for (auto& slice : *response->mutable_outputs()) result.outputs.push_back(SliceToIr(&slice));
  return result;
}

std::shared_ptr<ExecuteLink> ExecuteLink::Open(WorkerService::Stub* stub, std::string address) {
  std::shared_ptr<ExecuteLink> link(new ExecuteLink(std::move(address)));
  {
    absl::MutexLock lock(&link->mu_);
    link->self_ = link;
  }
  stub->async()->ExecuteStream(&link->context_, link.get());
  // Send writes from outside the reactions: the hold keeps the call (and its
  // OnDone) waiting until the stream ended and no write is out.
  link->AddHold();
  link->StartRead(&link->reply_);
  link->StartCall();
  return link;
}

bool ExecuteLink::Send(std::unique_ptr<ExecuteRequest>* request, absl::Duration timeout,
                       WorkerClient::ExecuteDone* done) {
  const ExecuteRequest* write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    const std::string& id = (*request)->request_id();
    if (ended_ || waiting_.count(id) > 0) return false;
    // The worker counts the budget from now, not from when it reads the
    // request (a queue of writes, a stopped worker): the absolute deadline.
    if ((*request)->deadline_ms() > 0 && (*request)->deadline_unix_us() == 0) {
      (*request)->set_deadline_unix_us(
          absl::ToUnixMicros(absl::Now() + absl::Milliseconds((*request)->deadline_ms())));
    }
    Waiting& waiting = waiting_[id];
    waiting.done = std::move(*done);
    if (timeout > absl::ZeroDuration()) {
      // The timer takes mu_ when it fires: never while Add holds the timer's.
      waiting.timer = Timer().Add(absl::Now() + timeout, [self = self_, id] {
        self->Expire(id);
      });
    }
    write = writes_.Push(std::move(*request));
  }
  if (write != nullptr) StartWrite(write);
  return true;
}

bool ExecuteLink::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void ExecuteLink::Close() { context_.TryCancel(); }

void ExecuteLink::Expire(const std::string& request_id) {
  WorkerClient::ExecuteDone done;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(request_id);
    if (it == waiting_.end()) return;  // answered meanwhile
    done = std::move(it->second.done);
    waiting_.erase(it);
  }
  done(absl::DeadlineExceededError(absl::StrCat(
      "Execute on ", address_, ": no answer to request ", request_id, " in time")));
}

bool ExecuteLink::ReleaseHoldLocked() {
  if (!read_ended_ || writes_.writing() || hold_released_) return false;
  hold_released_ = true;
  return true;
}

void ExecuteLink::OnWriteDone(bool ok) {
  const ExecuteRequest* write = nullptr;
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) ended_ = true;  // the stream broke: OnDone fails the calls waiting
    write = writes_.Done(ok);
    if (write == nullptr) release = ReleaseHoldLocked();
  }
  if (write != nullptr) StartWrite(write);
  if (release) RemoveHold();
}

void ExecuteLink::OnReadDone(bool ok) {
  if (!ok) {  // the stream ended (the worker went, or Close): OnDone follows
    bool release;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      read_ended_ = true;
      release = ReleaseHoldLocked();
    }
    if (release) RemoveHold();
    return;
  }
  ExecuteStreamReply reply;
  reply.Swap(&reply_);
  StartRead(&reply_);
  WorkerClient::ExecuteDone done;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(reply.request_id());
    if (it == waiting_.end()) return;  // it gave up (its timeout)
    done = std::move(it->second.done);
    if (it->second.timer != 0) Timer().Remove(it->second.timer);
    waiting_.erase(it);
  }
  if (reply.code() != 0) {
    done(absl::Status(static_cast<absl::StatusCode>(reply.code()),
                      absl::StrCat("Execute on ", address_, ": ", reply.message())));
    return;
  }
  done(TakeExecuteResult(reply.mutable_response()));
}

void ExecuteLink::OnDone(const grpc::Status& status) {
  std::vector<std::pair<std::string, WorkerClient::ExecuteDone>> failed;
  std::shared_ptr<ExecuteLink> keep;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    writes_.Clear();
    for (auto& [id, waiting] : waiting_) {
      if (waiting.timer != 0) Timer().Remove(waiting.timer);
      failed.emplace_back(id, std::move(waiting.done));
    }
    waiting_.clear();
    keep = std::move(self_);
  }
  for (auto& [id, done] : failed) {
    done(absl::UnavailableError(absl::StrCat("Execute on ", address_,
                                             ": the stream to the worker ended (",
                                             status.error_message(), ") before request ", id,
                                             " was answered")));
  }
  // The last reference may be this one, and the link holds its call, which
  // holds the channel: a channel destroyed on one of gRPC's callback threads
  // can take gRPC's shared callback queue down from its own thread (gRPC
  // 1.51 then frees it twice). So the link goes on an executor thread.
  ElasticExecutor::Shared().Schedule([keep = std::move(keep)]() mutable { keep.reset(); });
}

}  // namespace meshserve
