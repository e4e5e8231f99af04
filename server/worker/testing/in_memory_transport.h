// PeerTransport between WorkerEngines in one process (tests, in-process
// clusters). Send delivers on the calling thread straight into the
// destination's rendezvous (which only copies or moves bytes and never waits),
// then calls `done`: so it never blocks on a peer.
//
// Knobs for tests: `chunk_bytes` > 0 splits each slice into DataChunk-sized
// pieces through DeliverChunk (the gRPC path's receive logic) instead of
// moving it whole; SetLinkDown(worker) makes sends to that worker fail with
// kUnavailable, as a broken peer stream would (ReadParam too).
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_WORKER_TESTING_IN_MEMORY_TRANSPORT_H_
#define MESHSERVE_SERVER_WORKER_TESTING_IN_MEMORY_TRANSPORT_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/worker/peer_transport.h"
#include "server/worker/worker_engine.h"

namespace meshserve {

class InMemoryTransport : public PeerTransport {
 public:
  explicit InMemoryTransport(int64_t chunk_bytes = 0) : chunk_bytes_(chunk_bytes) {}

  // `engine` (not owned) receives the slices sent to `worker_id`.
  void Register(int64_t worker_id, WorkerEngine* engine);
  void SetLinkDown(int64_t worker_id, bool down);

  void Send(OutgoingSlice slice, DoneCallback done) override;
  // The peer engine's ReadParam, in chunks of chunk_bytes (1 MiB when 0).
  absl::Status ReadParam(int64_t worker, const ReadParamIr& request, absl::Time deadline,
                         const ParamChunkSink& on_chunk) override;

  int64_t bytes_sent() const { return Counter(&InMemoryTransport::bytes_sent_); }
  int64_t slices_sent() const { return Counter(&InMemoryTransport::slices_sent_); }
  // Bytes and calls of ReadParam.
  int64_t param_bytes_read() const { return Counter(&InMemoryTransport::param_bytes_read_); }
  int64_t param_reads() const { return Counter(&InMemoryTransport::param_reads_); }

 private:
  // The counter `counter` read under mu_.
  int64_t Counter(int64_t InMemoryTransport::*counter) const;

  const int64_t chunk_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, WorkerEngine*> engines_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> down_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slices_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t param_bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t param_reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_TESTING_IN_MEMORY_TRANSPORT_H_
