// PeerTransport over gRPC: WorkerService.PushData client streams and a
// long-lived WorkerService.PeerStream per peer for small rounds.
//
// Per peer (worker id -> address, from LoadModelRequest.worker_addresses) one
// channel (common/rpc/channel.h: large messages, low reconnect backoff) and one
// WorkerService::Stub, created on first use. Send/SendAll start the streams at
// once with gRPC's callback API and return: no sender thread, no queue. The
// jobs of one SendAll go out as one PushData stream per peer (a stream holds
// slices up to Options::max_batch_bytes in all, the first whatever its size;
// a peer's remaining jobs start further streams at the same time), each slice
// as DataChunks of Options::chunk_bytes (~1 MiB; the last may be shorter, an
// empty slice is one empty chunk; every chunk names its request and tag;
// whole slices that fit in one chunk together travel in one message, the
// first at the top and the rest in DataChunk.more), with the latest of their
// deadlines on the call. A request's run hands a round of
// sends over together (program_run.cc), so a tiny model's all-gather is one
// stream per peer; one blocking stream per slice on 4 sender threads
// serialised its requests (~9 ms), and the hop to a sender thread and a
// blocking Write per chunk cost ~0.3 ms per round on a loaded 2-core machine.
// A round whose slices for a peer fit in one chunk goes instead, as one
// message, on the long-lived PeerStream to that peer (peer_stream.h; opened on
// first use, replaced when it ends or the peer's address changes): one write
// and one read per round where a PushData stream costs a dozen callbacks
// (a tiny model's request: two such rounds per worker). Its `done` gets OK
// when the message is written; a chunk the receiver rejects fails the request
// there (its receives report the reason).
// Each PushData `done` gets OK when the receiver acknowledged the whole stream, else
// the stream's status converted with FromGrpcStatus and prefixed with the peer
// ("worker 3 at 127.0.0.1:5001: ..."): kUnavailable when the peer cannot be
// reached, kDeadlineExceeded past the deadline, or the receiver's rejection
// (which fails every slice of that stream). `done` runs on a gRPC thread, or
// inline when the peer has no address.
//
// ReadParam opens one WorkerService.ReadParam stream on the caller's thread
// and hands each ParamChunk's data to the sink as views into the received
// buffers (common/rpc/zero_copy/bytes_field_wire.h: one view per received slice, so a
// chunk may come as several views); errors carry the same peer prefix.
//
// Thread-safety: thread-safe. The destructor cancels the peer streams and
// waits for them and the PushData streams in flight to end (acknowledged,
// failed, or past their deadline); sends that start
// while it runs fail at once with kCancelled.
#ifndef MESHSERVE_SERVER_WORKER_GRPC_GRPC_PEER_TRANSPORT_H_
#define MESHSERVE_SERVER_WORKER_GRPC_GRPC_PEER_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/channel.h"
#include "proto/worker_service.grpc.pb.h"
#include "server/worker/peer_stream.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

class GrpcPeerTransport : public PeerTransport {
 public:
  struct Options {
    int64_t chunk_bytes = int64_t{1} << 20;
    int64_t max_batch_bytes = int64_t{4} << 20;
    // A round's slices for one peer that fit in one chunk go on the long-lived
    // PeerStream to that peer (peer_stream.h) instead of a PushData stream.
    bool peer_streams = true;
    // Peer channels (RpcSecurity::MemberChannelOptions with --tls_dir).
    ChannelOptions channel;
  };

  GrpcPeerTransport() : GrpcPeerTransport(Options()) {}
  explicit GrpcPeerTransport(Options options);
  ~GrpcPeerTransport() override;

  void Send(OutgoingSlice slice, DoneCallback done) override;
  void SendAll(std::vector<Job> jobs) override;
  void UpdatePeers(const std::map<int64_t, std::string>& addresses) override;
  void CancelOnPeer(int64_t worker, const std::string& request_id,
                    const std::string& reason) override;
  // WorkerService.ReadParam on the calling thread (a server stream).
  absl::Status ReadParam(int64_t worker, const ReadParamIr& request, absl::Time deadline,
                         const ParamChunkSink& on_chunk) override;

  int64_t chunks_sent() const { return Counter(&GrpcPeerTransport::chunks_sent_); }
  int64_t slices_sent() const { return Counter(&GrpcPeerTransport::slices_sent_); }
  int64_t streams_opened() const { return Counter(&GrpcPeerTransport::streams_opened_); }

 private:
  // The counter `counter` read under mu_.
  int64_t Counter(int64_t GrpcPeerTransport::*counter) const;

  struct Peer {
    std::string address;
    std::shared_ptr<WorkerService::Stub> stub;  // created on first use
    std::shared_ptr<grpc::Channel> channel;     // the stub's (raw calls)
    std::shared_ptr<PeerStream> stream;         // opened on first small round
  };
  class PushCall;  // one PushData stream (grpc_peer_transport.cc)
  // Starts one stream carrying `batch` (all for one peer).
  void StartPush(std::vector<Job> batch);
  // Queues `batch` (one message's worth, all for `dst`) on dst's PeerStream.
  void SendOnStream(int64_t dst, std::vector<Job> batch);
  // dst's open PeerStream, started when there is none.
  absl::StatusOr<std::shared_ptr<PeerStream>> StreamFor(int64_t worker);
  // A PeerStream's on_end: forgets it (a later round opens a new one).
  void StreamEnded(int64_t worker, PeerStream* stream);
  // Called by a PushCall when its stream ended (before its jobs' `done`).
  void PushEnded(PushCall* call, int64_t chunks, int64_t slices);
  // The stub of `worker` (creating the channel), its channel and address.
  struct PeerLink {
    std::shared_ptr<WorkerService::Stub> stub;
    std::shared_ptr<grpc::Channel> channel;
    std::string address;
  };
  absl::StatusOr<PeerLink> LinkFor(int64_t worker);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Peer> peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<PushCall*> active_ ABSL_GUARDED_BY(mu_);  // streams in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t chunks_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slices_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;  // PushData and PeerStream
  int64_t open_streams_ ABSL_GUARDED_BY(mu_) = 0;    // PeerStreams not yet ended
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_GRPC_PEER_TRANSPORT_H_
