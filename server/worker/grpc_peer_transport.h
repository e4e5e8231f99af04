// PeerTransport over gRPC: WorkerService.PushData client streams.
//
// Per peer (worker id -> address, from LoadModelRequest.worker_addresses) one
// channel (common/rpc/channel.h: large messages, low reconnect backoff) and one
// WorkerService::Stub, created on first use. Send queues the slice to a small
// pool of sender threads (Options::num_senders) and returns at once; a sender
// opens one PushData stream per slice and writes it in DataChunks of
// Options::chunk_bytes (~1 MiB; the last may be shorter, an empty slice is one
// empty chunk), with the slice's deadline on the call. `done` gets OK when the
// receiver acknowledged every chunk, else the stream's status converted with
// FromGrpcStatus and prefixed with the peer ("worker 3 at 127.0.0.1:5001: ..."):
// kUnavailable when the peer cannot be reached, kDeadlineExceeded past the
// deadline, or the receiver's rejection.
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
    // Peer channels (RpcSecurity::MemberChannelOptions with --tls_dir).
    ChannelOptions channel;
  };

  GrpcPeerTransport() : GrpcPeerTransport(Options()) {}
  explicit GrpcPeerTransport(Options options);
  ~GrpcPeerTransport() override;

  void Send(OutgoingSlice slice, DoneCallback done) override;
  void UpdatePeers(const std::map<int64_t, std::string>& addresses) override;
  void CancelOnPeer(int64_t worker, const std::string& request_id,
                    const std::string& reason) override;

  int64_t chunks_sent() const;

 private:
  struct Peer {
    std::string address;
    std::shared_ptr<WorkerService::Stub> stub;  // created on first use
  };
  struct Job {
    OutgoingSlice slice;
    DoneCallback done;
  };

  void SenderLoop();
  // Streams one slice; returns the outcome.
  absl::Status Push(const OutgoingSlice& slice);
  // The stub of `worker` (creating the channel), and its address.
  absl::StatusOr<std::pair<std::shared_ptr<WorkerService::Stub>, std::string>> StubFor(
      int64_t worker);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t chunks_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> senders_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_PEER_TRANSPORT_H_
