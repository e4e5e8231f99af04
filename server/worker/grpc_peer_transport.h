// PeerTransport over gRPC: WorkerService.PushData client streams.
//
// Per peer (worker id -> address, from LoadModelRequest.worker_addresses) one
// channel (common/rpc/channel.h: large messages, low reconnect backoff) and one
// WorkerService::Stub, created on first use. Send/SendAll queue the slices to a
// small pool of sender threads (Options::num_senders) and return at once. A
// sender takes the oldest queued slice and every other queued slice for the
// same peer (up to Options::max_batch_bytes in all; the first whatever its
// size) and writes them on one PushData stream, each slice as DataChunks of
// Options::chunk_bytes (~1 MiB; the last may be shorter, an empty slice is one
// empty chunk; every chunk names its request and tag), with the latest of
// their deadlines on the call. So the slices of one SendAll for a peer share
// one stream, and under load so do those of concurrent requests: one stream
// per slice, each a blocking round trip on one of 4 threads, serialised a
// tiny model's requests (16 slices per worker and request, ~9 ms).
// Each `done` gets OK when the receiver acknowledged the whole stream, else
// the stream's status converted with FromGrpcStatus and prefixed with the peer
// ("worker 3 at 127.0.0.1:5001: ..."): kUnavailable when the peer cannot be
// reached, kDeadlineExceeded past the deadline, or the receiver's rejection
// (which fails every slice of that stream).
//
// ReadParam opens one WorkerService.ReadParam stream on the caller's thread
// and hands each ParamChunk to the sink; errors carry the same peer prefix.
//
// Thread-safety: thread-safe. The destructor stops the senders: queued slices
// fail with kCancelled.
#ifndef MESHSERVE_SERVER_WORKER_GRPC_PEER_TRANSPORT_H_
#define MESHSERVE_SERVER_WORKER_GRPC_PEER_TRANSPORT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/channel.h"
#include "proto/worker_service.grpc.pb.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

class GrpcPeerTransport : public PeerTransport {
 public:
  struct Options {
    int num_senders = 4;
    int64_t chunk_bytes = int64_t{1} << 20;
    int64_t max_batch_bytes = int64_t{4} << 20;
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

  int64_t chunks_sent() const;
  int64_t slices_sent() const;
  int64_t streams_opened() const;

 private:
  struct Peer {
    std::string address;
    std::shared_ptr<WorkerService::Stub> stub;  // created on first use
  };
  void SenderLoop();
  // The oldest job and the other queued jobs for its peer (see the top).
  std::vector<Job> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Streams the batch's slices (all for one peer); returns the outcome.
  absl::Status Push(const std::vector<Job>& batch);
  // The stub of `worker` (creating the channel), and its address.
  absl::StatusOr<std::pair<std::shared_ptr<WorkerService::Stub>, std::string>> StubFor(
      int64_t worker);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t chunks_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slices_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> senders_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_PEER_TRANSPORT_H_
