// How a worker's SendSteps reach their peers.
//
// The ShardWorker core never talks to the network itself: a SendStep extracts
// the box's bytes and hands one `OutgoingSlice` to its PeerTransport, which
// delivers it to the destination worker's rendezvous (ShardWorker::DeliverChunk
// / DeliverSlice on the receiving side) and then calls `done` exactly once,
// with OK or with the reason the slice could not be delivered.
//
// A round of SendSteps (those up to the next receive or compute, program_run.cc)
// is handed over at once (`SendAll`), so a
// transport can carry the slices for one peer together: a tiny model's
// all-gather is 16 small slices per worker and request, and one gRPC stream
// per slice made the data plane cost ~9 ms per request.
//
// Contract: `Send` and `SendAll` never block on the network or on the peer (it queues the
// work and returns), so a worker's step loop never waits for a send; `done` may
// run on any thread (or inline, before Send returns, for an immediate failure).
//
// `done(OK)` may also mean "written to the peer's connection" (a transport
// whose channel carries no acknowledgement, GrpcPeerTransport's PeerStream):
// the receiver then reports a slice it rejects by failing that request itself.
//
// Implementations: InMemoryTransport (workers in one process, tests) and
// GrpcPeerTransport (WorkerService.PushData streams of ~1 MiB DataChunks, and
// a long-lived PeerStream per peer for small rounds).
//
// ReadParam is the other direction and blocks: a worker loading or committing
// params (LoadModelRequest.sources, CommitParamsRequest.fills) reads a box of a
// peer's held param (WorkerService.ReadParam: ~1 MiB ParamChunks in order).
// It never runs on a step loop.
//
// Thread-safety: implementations must be thread-safe.
#ifndef MESHSERVE_SERVER_WORKER_PEER_TRANSPORT_H_
#define MESHSERVE_SERVER_WORKER_PEER_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"
#include "common/program/program_ir.h"

namespace meshserve {

struct OutgoingSlice {
  std::string request_id;
  std::string tag;
  int64_t src_worker = -1;
  int64_t dst_worker = -1;
  int64_t dst_device = -1;
  std::optional<DType> dtype;  // the sent buffer's dtype
  std::string bytes;  // raw row-major bytes of the sent box
  absl::Time deadline = absl::InfiniteFuture();
};

// Bytes of a ReadParam stream at `offset` in the box: a ParamChunk or a piece
// of one, in order (the bytes are valid during the call that receives them).
struct ParamChunkView {
  int64_t total_bytes = 0;  // of the whole box
  int64_t offset = 0;       // of this chunk within the box's bytes
  absl::string_view data;
  std::optional<DType> dtype;  // the param's dtype (nullopt: not given)
};
using ParamChunkSink = std::function<absl::Status(const ParamChunkView&)>;

// The bytes of a box of a held param (row-major, the param's dtype), as a
// worker serves them: a view into the held buffer (or a copy) that stays valid
// while `keep_alive` lives.
struct ParamBytes {
  DType dtype = DType::kFloat32;
  absl::string_view bytes;
  std::shared_ptr<const void> keep_alive;
};

class PeerTransport {
 public:
  using DoneCallback = std::function<void(absl::Status)>;

  virtual ~PeerTransport() = default;

  // Queues `slice` for its dst_worker. See the contract above.
  // Errors reach `done`: kUnavailable for an unknown or unreachable peer (the
  // message names the worker id and address), kDeadlineExceeded past the
  // slice's deadline, or the receiver's rejection (e.g. kInvalidArgument).
  virtual void Send(OutgoingSlice slice, DoneCallback done) = 0;

  struct Job {
    OutgoingSlice slice;
    DoneCallback done;
  };
  // Queues several slices at once, each with its own `done` as for Send. The
  // default sends them one by one.
  virtual void SendAll(std::vector<Job> jobs) {
    for (Job& job : jobs) Send(std::move(job.slice), std::move(job.done));
  }

  // Addresses of peers by worker id (from LoadModelRequest.worker_addresses).
  // Entries are added or replaced; transports that need no address ignore it.
  virtual void UpdatePeers(const std::map<int64_t, std::string>& addresses) {}

  // Cancel on a peer (best effort, asynchronous): WorkerService.Cancel.
  virtual void CancelOnPeer(int64_t worker, const std::string& request_id,
                            const std::string& reason) {}

  // Reads request.box of request.param of peer `worker`'s (model, generation,
  // version) (WorkerService.ReadParam) and calls `on_chunk` for each chunk in
  // order, on the calling thread; blocks until the stream ends or `deadline`.
  // \error kUnavailable naming the worker for an unknown or unreachable peer,
  //   kDeadlineExceeded, the peer's error (kNotFound, kOutOfRange, ...), or
  //   the first error of `on_chunk` (which ends the read). The default:
  //   kUnimplemented.
  virtual absl::Status ReadParam(int64_t worker, const ReadParamIr& request,
                                 absl::Time deadline, const ParamChunkSink& on_chunk);
};

inline absl::Status PeerTransport::ReadParam(int64_t worker, const ReadParamIr& request,
                                             absl::Time deadline,
                                             const ParamChunkSink& on_chunk) {
  return absl::UnimplementedError("this peer transport cannot read params from peers");
}

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PEER_TRANSPORT_H_
