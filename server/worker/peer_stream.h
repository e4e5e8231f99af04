// One long-lived WorkerService.PeerStream from this worker to a peer
// (GrpcPeerTransport's path for small rounds).
//
// A PushData stream per round costs a stream's start, write, half-close and
// finish on both ends: about a dozen gRPC callbacks, each a thread switch, for
// a round of a few KiB (a tiny model's request has two rounds). On this stream
// a round is one write on the sender and one read on the receiver.
//
// Messages are written in the order they are queued, one write at a time;
// messages queued while a write is in flight are merged into the next write
// (DataChunk.more) while they fit in `max_message_bytes`. Each message's
// `done` callbacks run with OK when its write completed (the bytes are in the
// connection: the receiver reports a chunk it rejects by failing that request
// on its side), or with the stream's error when it ended first.
//
// Lifetime: shared_ptr; the stream holds itself until gRPC's OnDone, so a
// caller may drop its reference at any time. `on_end` runs once, in OnDone,
// after the queued callbacks and before the last self-reference is dropped.
//
// Thread-safety: Enqueue and Cancel may be called from any thread.
#ifndef MESHSERVE_SERVER_WORKER_PEER_STREAM_H_
#define MESHSERVE_SERVER_WORKER_PEER_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "proto/worker_service.grpc.pb.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

class PeerStream final : public grpc::ClientBidiReactor<DataChunk, PushAck>,
                         public std::enable_shared_from_this<PeerStream> {
 public:
  using DoneCallback = PeerTransport::DoneCallback;

  // `peer` names the peer in errors ("worker 1 at host:port").
  static std::shared_ptr<PeerStream> Start(std::shared_ptr<WorkerService::Stub> stub,
                                           std::string peer, int64_t max_message_bytes,
                                           std::function<void(PeerStream*)> on_end);

  // Queues *message, moving it and *done (one per slice in it) out; `done`
  // runs as above. False when the stream has ended: both are left as they
  // were and no callback is called.
  bool Enqueue(DataChunk* message, std::vector<DoneCallback>* done);
  // Ends the stream (queued messages fail with kCancelled).
  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct Pending {
    DataChunk message;
    int64_t bytes = 0;  // data bytes in message (and its `more`)
    std::vector<DoneCallback> done;
  };
  PeerStream(std::shared_ptr<WorkerService::Stub> stub, std::string peer,
             int64_t max_message_bytes, std::function<void(PeerStream*)> on_end);
  // Moves the queue's head (merged with what follows while it fits) into
  // writing_. Requires a non-empty queue.
  void TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True (once) when the hold is to be removed now.
  bool ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<WorkerService::Stub> stub_;
  const std::string peer_;
  const int64_t max_message_bytes_;
  const std::function<void(PeerStream*)> on_end_;
  grpc::ClientContext context_;
  PushAck ignored_;  // the receiver never writes; the read ends with the stream
  std::shared_ptr<PeerStream> self_;  // until OnDone

  absl::Mutex mu_;
  // No write starts once set: the read ended (the stream is over) or a write
  // failed.
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The hold taken at Start keeps OnDone away while a write may still be
  // started from outside a reaction (Enqueue); removed once ended_ and no
  // write is in flight.
  bool hold_removed_ ABSL_GUARDED_BY(mu_) = false;
  // The message being written: set under mu_ by whoever sets
  // write_in_flight_, then read by gRPC (no lock) until OnWriteDone.
  Pending writing_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  // Callbacks of messages whose write failed (they fail in OnDone).
  std::vector<DoneCallback> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PEER_STREAM_H_
