#include "server/worker/grpc/grpc_peer_transport.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/program/program_proto.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/param_chunk_reader.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace meshserve {

namespace {

void FillChunk(const OutgoingSlice& slice, int64_t offset, int64_t n, DataChunk* chunk) {
  chunk->set_request_id(slice.request_id);
  chunk->set_tag(slice.tag);
  chunk->set_dst_device(slice.dst_device);
  chunk->set_total_bytes(static_cast<int64_t>(slice.bytes.size()));
  chunk->set_src_worker(slice.src_worker);
  chunk->set_dtype(static_cast<decltype(chunk->dtype())>(OptionalDTypeToProto(slice.dtype)));
  chunk->set_offset(offset);
  chunk->set_data(slice.bytes.data() + offset, n);
}

// Moves whole slices, from batch[*next] on, into *message (the first at the
// top, the rest in DataChunk.more) while their bytes together fit in `limit`
// (the first whatever its size); their bytes are moved, not copied. Advances
// *next past them and returns how many it packed.
int64_t PackWholeSlices(std::vector<PeerTransport::Job>& batch, size_t* next, int64_t limit,
                        DataChunk* message) {
  int64_t packed = 0, count = 0;
  for (; *next < batch.size(); ++*next, ++count) {
    OutgoingSlice& slice = batch[*next].slice;
    const int64_t size = static_cast<int64_t>(slice.bytes.size());
    if (count > 0 && packed + size > limit) break;
    DataChunk* chunk = count == 0 ? message : message->add_more();
    FillChunk(slice, 0, 0, chunk);            // the header (total_bytes = size)
    chunk->set_data(std::move(slice.bytes));  // the bytes
    packed += size;
  }
  return count;
}

}  // namespace

GrpcPeerTransport::GrpcPeerTransport(Options options) : options_(options) {}

GrpcPeerTransport::~GrpcPeerTransport() {
  // PushData streams end on their own (acknowledged, failed or past their
  // deadline); peer streams are long-lived and are cancelled.
  std::vector<std::shared_ptr<PeerStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [worker, peer] : peers_) {
      if (peer.stream != nullptr) streams.push_back(std::move(peer.stream));
    }
  }
  // Outside mu_: a cancel may run the stream's OnDone (StreamEnded) inline.
  for (const std::shared_ptr<PeerStream>& stream : streams) stream->Cancel();
  streams.clear();
  absl::MutexLock lock(&mu_);
  auto all_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return active_.empty() && open_streams_ == 0;
  };
  mu_.Await(absl::Condition(&all_ended));
}

void GrpcPeerTransport::UpdatePeers(const std::map<int64_t, std::string>& addresses) {
  std::vector<std::shared_ptr<PeerStream>> replaced;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [worker, address] : addresses) {
      Peer& peer = peers_[worker];
      if (peer.address != address) {
        peer.address = address;
        peer.stub.reset();
        if (peer.stream != nullptr) replaced.push_back(std::move(peer.stream));
      }
    }
  }
  for (const std::shared_ptr<PeerStream>& stream : replaced) stream->Cancel();
}

absl::StatusOr<GrpcPeerTransport::PeerLink> GrpcPeerTransport::LinkFor(int64_t worker) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(worker);
  if (it == peers_.end()) return Unavailable("worker ", worker, " has no known address");
  Peer& peer = it->second;
  if (peer.stub == nullptr) {
    // gRPC takes min_reconnect_backoff_ms as the connect timeout too: a busy
    // peer (every worker loads at once in a scale step) can need more than
    // the default 100 ms for the handshake, and the step failed with
    // "tcp handshaker shutdown". Connections refused still fail at once.
    ChannelOptions channel = options_.channel;
    channel.min_reconnect_backoff_ms = std::max(channel.min_reconnect_backoff_ms, 5000);
    MS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> connection,
                        CreateChannel(peer.address, channel), "worker ", worker);
    peer.stub = std::shared_ptr<WorkerService::Stub>(WorkerService::NewStub(connection));
    peer.channel = std::move(connection);
  }
  // Callers share ownership: a stub replaced by UpdatePeers stays alive until
  // its streams end.
  return PeerLink{peer.stub, peer.channel, peer.address};
}

// One PushData stream: writes its jobs' slices (each write starts when the
// previous one is done; small slices packed into one message), half-closes
// with the last message, and on the stream's end reports its status to every
// job and deletes itself.
class GrpcPeerTransport::PushCall final : public grpc::ClientWriteReactor<DataChunk> {
 public:
  PushCall(GrpcPeerTransport* transport, std::vector<Job> batch, std::string peer,
           int64_t chunk_bytes)
      : transport_(transport),
        batch_(std::move(batch)),
        peer_(std::move(peer)),
        chunk_bytes_(std::max<int64_t>(1, chunk_bytes)) {
    absl::Time deadline = absl::InfinitePast();
    for (const Job& job : batch_) deadline = std::max(deadline, job.slice.deadline);
    SetDeadlineAt(&context_, deadline);
  }

  // `stub` is kept until the stream ends (UpdatePeers may replace it).
  void Start(std::shared_ptr<WorkerService::Stub> stub) {
    stub_ = std::move(stub);
    stub_->async()->PushData(&context_, &ack_, this);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the stream broke: OnDone says why
    written_ = slice_;
    chunks_ += chunks_in_message_;
    if (slice_ < batch_.size()) WriteNext();  // else that was StartWriteLast
  }

  void OnDone(const grpc::Status& status) override {
    absl::Status result;
    if (!status.ok()) {
      result = AnnotateStatus(FromGrpcStatus(status), peer_);
    } else if (written_ < batch_.size()) {
      result = Unavailable(peer_, ": stream closed after ", written_, " of ", batch_.size(),
                           " slices");
    }
    // After this the transport may be destroyed: only the jobs are used.
    std::vector<Job> batch = std::move(batch_);
    transport_->PushEnded(this, chunks_, static_cast<int64_t>(written_));
    for (Job& job : batch) job.done(result);
    delete this;
  }

 private:
  // Writes the next message: the next chunk of a slice larger than a chunk,
  // or as many whole slices as fit in one chunk (DataChunk.more).
  void WriteNext() {
    message_.Clear();
    const OutgoingSlice& first = batch_[slice_].slice;
    const int64_t total = static_cast<int64_t>(first.bytes.size());
    if (offset_ > 0 || total > chunk_bytes_) {
      const int64_t n = std::min(chunk_bytes_, total - offset_);
      FillChunk(first, offset_, n, &message_);
      offset_ += n;
      if (offset_ >= total) {
        ++slice_;
        offset_ = 0;
      }
      chunks_in_message_ = 1;
    } else {
      chunks_in_message_ = PackWholeSlices(batch_, &slice_, chunk_bytes_, &message_);
    }
    if (slice_ == batch_.size()) {
      StartWriteLast(&message_, grpc::WriteOptions());
    } else {
      StartWrite(&message_);
    }
  }

  GrpcPeerTransport* const transport_;
  std::shared_ptr<WorkerService::Stub> stub_;
  std::vector<Job> batch_;
  const std::string peer_;
  const int64_t chunk_bytes_;
  grpc::ClientContext context_;
  PushAck ack_;
  DataChunk message_;
  size_t slice_ = 0;    // the next slice to write; == batch_.size() when all are
  int64_t offset_ = 0;  // bytes of it written or being written
  size_t written_ = 0;  // whole slices whose last write completed
  int64_t chunks_ = 0;  // chunks written (a packed slice is one chunk)
  int64_t chunks_in_message_ = 0;
};

void GrpcPeerTransport::Send(OutgoingSlice slice, DoneCallback done) {
  std::vector<Job> jobs;
  jobs.push_back(Job{std::move(slice), std::move(done)});
  SendAll(std::move(jobs));
}

void GrpcPeerTransport::SendAll(std::vector<Job> jobs) {
  // Per peer, in order: streams of up to max_batch_bytes (the first job of a
  // stream whatever its size).
  struct Batch {
    int64_t bytes = 0;
    std::vector<Job> jobs;
  };
  std::map<int64_t, std::vector<Batch>> streams;
  for (Job& job : jobs) {
    const int64_t size = static_cast<int64_t>(job.slice.bytes.size());
    std::vector<Batch>& batches = streams[job.slice.dst_worker];
    if (batches.empty() || batches.back().bytes + size > options_.max_batch_bytes) {
      batches.emplace_back();
    }
    batches.back().bytes += size;
    batches.back().jobs.push_back(std::move(job));
  }
  for (auto& [peer, batches] : streams) {
    for (Batch& batch : batches) {
      if (options_.peer_streams && batch.bytes <= options_.chunk_bytes) {
        SendOnStream(peer, std::move(batch.jobs));
      } else {
        StartPush(std::move(batch.jobs));
      }
    }
  }
}

void GrpcPeerTransport::SendOnStream(int64_t dst, std::vector<Job> batch) {
  DataChunk message;
  size_t next = 0;
  const int64_t slices =
      PackWholeSlices(batch, &next, std::numeric_limits<int64_t>::max(), &message);
  std::vector<DoneCallback> done;
  for (Job& job : batch) done.push_back(std::move(job.done));
  // A stream that ended since it was looked up is replaced once; a second
  // failure to queue is the peer's state (unreachable, shutting down).
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::shared_ptr<PeerStream>> stream = StreamFor(dst);
    if (!stream.ok()) {
      for (DoneCallback& callback : done) callback(stream.status());
      return;
    }
    if ((*stream)->Enqueue(&message, &done)) {
      absl::MutexLock lock(&mu_);
      chunks_sent_ += slices;
      slices_sent_ += slices;
      return;
    }
  }
  const absl::Status ended = Unavailable("worker ", dst, ": peer stream ended while queueing");
  for (DoneCallback& callback : done) callback(ended);
}

absl::StatusOr<std::shared_ptr<PeerStream>> GrpcPeerTransport::StreamFor(int64_t worker) {
  MS_ASSIGN_OR_RETURN(PeerLink link, LinkFor(worker));
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::CancelledError("peer transport shutting down");
  Peer& peer = peers_[worker];
  if (peer.stream == nullptr) {
    ++open_streams_;
    ++streams_opened_;
    peer.stream = PeerStream::Start(
        std::move(link.stub), absl::StrCat("worker ", worker, " at ", link.address),
        options_.chunk_bytes, [this, worker](PeerStream* ended) { StreamEnded(worker, ended); });
  }
  return peer.stream;
}

void GrpcPeerTransport::StreamEnded(int64_t worker, PeerStream* stream) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(worker);
  if (it != peers_.end() && it->second.stream.get() == stream) it->second.stream.reset();
  --open_streams_;
}

void GrpcPeerTransport::StartPush(std::vector<Job> batch) {
  const int64_t dst = batch.front().slice.dst_worker;
  absl::StatusOr<PeerLink> link = LinkFor(dst);
  absl::Status failed = link.status();
  PushCall* call = nullptr;
  if (link.ok()) {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      failed = absl::CancelledError("peer transport shutting down");
    } else {
      call = new PushCall(this, std::move(batch),
                          absl::StrCat("worker ", dst, " at ", link->address),
                          options_.chunk_bytes);
      active_.insert(call);
      ++streams_opened_;
    }
  }
  if (call == nullptr) {
    for (Job& job : batch) job.done(failed);
    return;
  }
  call->Start(link->stub);
}

void GrpcPeerTransport::PushEnded(PushCall* call, int64_t chunks, int64_t slices) {
  absl::MutexLock lock(&mu_);
  chunks_sent_ += chunks;
  slices_sent_ += slices;
  active_.erase(call);
}

void GrpcPeerTransport::CancelOnPeer(int64_t worker, const std::string& request_id,
                                     const std::string& reason) {
  absl::StatusOr<PeerLink> link = LinkFor(worker);
  if (!link.ok()) return;
  struct Call {
    std::shared_ptr<WorkerService::Stub> stub;  // alive until the call ends
    grpc::ClientContext context;
    CancelRequest request;
    CancelResponse response;
  };
  auto* call = new Call;
  call->stub = link->stub;
  call->request.set_request_id(request_id);
  call->request.set_reason(reason);
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  link->stub->async()->Cancel(&call->context, &call->request, &call->response,
                               [call](grpc::Status) { delete call; });
}

absl::Status GrpcPeerTransport::ReadParam(int64_t worker, const ReadParamIr& request,
                                          absl::Time deadline,
                                          const ParamChunkSink& on_chunk) {
  MS_ASSIGN_OR_RETURN(PeerLink link, LinkFor(worker));
  const std::string peer = absl::StrCat("worker ", worker, " at ", link.address);
  ReadParamRequest message;
  ReadParamFromIr(request, &message);
  // A connection to a peer that is busy (a scale step loads every worker at
  // once) can miss the channel's short connect timeout; the call fails with
  // UNAVAILABLE before any byte arrived. Then it is tried once more, waiting
  // for the connection (at most kConnectGrace, within the deadline).
  constexpr absl::Duration kConnectGrace = absl::Seconds(10);
  absl::Status first_unavailable;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    absl::Time until = deadline;
    if (attempt > 0) {
      context.set_wait_for_ready(true);
      until = std::min(deadline, absl::Now() + kConnectGrace);
    }
    SetDeadlineAt(&context, until);
    // The chunks' data reaches the sink as views into the received buffers.
    const ParamReadOutcome read = ReadParamChunks(
        link.channel.get(), &context, message, [&](const ParamChunkPiece& piece) {
          return on_chunk(
              ParamChunkView{piece.total_bytes, piece.offset, piece.data, piece.dtype});
        });
    if (!read.chunks.ok()) return AnnotateStatus(read.chunks, peer);
    if (absl::IsUnavailable(read.call) && !read.any_chunk && attempt == 0) {
      first_unavailable = read.call;
      continue;
    }
    if (absl::IsDeadlineExceeded(read.call) && !read.any_chunk && attempt > 0) {
      // No connection on the retry either: the peer is gone (a SIGKILLed
      // worker), not slow. Its first error says so.
      return AnnotateStatus(first_unavailable, peer, " (no connection on a retry either)");
    }
    if (!read.call.ok()) return AnnotateStatus(read.call, peer);
    return absl::OkStatus();
  }
}

int64_t GrpcPeerTransport::Counter(int64_t GrpcPeerTransport::*counter) const {
  absl::MutexLock lock(&mu_);
  return this->*counter;
}

}  // namespace meshserve
