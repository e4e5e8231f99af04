#include "server/worker/peer_stream.h"

#include <utility>

#include "common/base/status_util.h"
#include "common/rpc/grpc_status.h"

namespace meshserve {
namespace {

// Appends `from` (its first chunk and its `more`) to `to.more`.
void MergeInto(DataChunk from, DataChunk* to) {
  DataChunk* first = to->add_more();
  for (DataChunk& more : *from.mutable_more()) *to->add_more() = std::move(more);
  from.clear_more();
  *first = std::move(from);
}

}  // namespace

PeerStream::PeerStream(std::shared_ptr<WorkerService::Stub> stub, std::string peer,
                       int64_t max_message_bytes, std::function<void(PeerStream*)> on_end)
    : stub_(std::move(stub)),
      peer_(std::move(peer)),
      max_message_bytes_(max_message_bytes),
      on_end_(std::move(on_end)) {}

std::shared_ptr<PeerStream> PeerStream::Start(std::shared_ptr<WorkerService::Stub> stub,
                                              std::string peer, int64_t max_message_bytes,
                                              std::function<void(PeerStream*)> on_end) {
  std::shared_ptr<PeerStream> stream(
      new PeerStream(std::move(stub), std::move(peer), max_message_bytes, std::move(on_end)));
  stream->self_ = stream;
  stream->stub_->async()->PeerStream(&stream->context_, stream.get());
  stream->AddHold();
  stream->StartRead(&stream->ignored_);
  stream->StartCall();
  return stream;
}

bool PeerStream::Enqueue(DataChunk* message, std::vector<DoneCallback>* done) {
  int64_t bytes = static_cast<int64_t>(message->data().size());
  for (const DataChunk& more : message->more()) bytes += static_cast<int64_t>(more.data().size());
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    Pending& pending = queue_.emplace_back();
    pending.bytes = bytes;
    pending.message = std::move(*message);
    pending.done = std::move(*done);
    if (write_in_flight_) return true;  // OnWriteDone takes it
    write_in_flight_ = true;
    TakeNextLocked();
  }
  // The hold keeps the call alive: OnDone waits for this write.
  StartWrite(&writing_.message);
  return true;
}

void PeerStream::TakeNextLocked() {
  writing_ = std::move(queue_.front());
  queue_.pop_front();
  while (!queue_.empty() && writing_.bytes + queue_.front().bytes <= max_message_bytes_) {
    Pending& next = queue_.front();
    MergeInto(std::move(next.message), &writing_.message);
    writing_.bytes += next.bytes;
    for (DoneCallback& done : next.done) writing_.done.push_back(std::move(done));
    queue_.pop_front();
  }
}

bool PeerStream::ReleaseHoldLocked() {
  if (!ended_ || write_in_flight_ || hold_removed_) return false;
  hold_removed_ = true;
  return true;
}

void PeerStream::OnWriteDone(bool ok) {
  std::vector<DoneCallback> written;
  bool next = false, release = false;
  {
    absl::MutexLock lock(&mu_);
    if (ok) {
      written = std::move(writing_.done);
    } else {
      ended_ = true;  // the stream broke: OnDone has the status
      for (DoneCallback& done : writing_.done) failed_.push_back(std::move(done));
    }
    writing_ = Pending();
    if (!ended_ && !queue_.empty()) {
      TakeNextLocked();
      next = true;
    } else {
      write_in_flight_ = false;
      release = ReleaseHoldLocked();
    }
  }
  for (DoneCallback& done : written) done(absl::OkStatus());
  if (next) StartWrite(&writing_.message);
  if (release) RemoveHold();
}

void PeerStream::OnReadDone(bool ok) {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    // The receiver never writes: any read's end is the stream's end (a
    // message would be a protocol error; the stream ends the same way).
    ended_ = true;
    release = ReleaseHoldLocked();
  }
  if (ok) Cancel();
  if (release) RemoveHold();
}

void PeerStream::OnDone(const grpc::Status& status) {
  std::vector<DoneCallback> failed;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    failed = std::move(failed_);
    for (Pending& pending : queue_) {
      for (DoneCallback& done : pending.done) failed.push_back(std::move(done));
    }
    queue_.clear();
  }
  if (!failed.empty()) {
    const absl::Status error =
        status.ok() ? Unavailable(peer_, ": peer stream ended")
                    : AnnotateStatus(FromGrpcStatus(status), peer_);
    for (DoneCallback& done : failed) done(error);
  }
  on_end_(this);
  std::shared_ptr<PeerStream> last = std::move(self_);  // may destroy this on return
}

}  // namespace meshserve
