#include "server/worker/grpc_peer_transport.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/program_proto.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/client_context.h"

namespace meshserve {

GrpcPeerTransport::GrpcPeerTransport(Options options) : options_(options) {
  const int n = std::max(1, options_.num_senders);
  for (int i = 0; i < n; ++i) senders_.emplace_back([this]() { SenderLoop(); });
}

GrpcPeerTransport::~GrpcPeerTransport() {
  std::deque<Job> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (std::thread& t : senders_) t.join();
  for (Job& job : dropped) job.done(absl::CancelledError("peer transport shutting down"));
}

void GrpcPeerTransport::UpdatePeers(const std::map<int64_t, std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  for (const auto& [worker, address] : addresses) {
    Peer& peer = peers_[worker];
    if (peer.address != address) {
      peer.address = address;
      peer.stub.reset();
    }
  }
}

absl::StatusOr<std::pair<std::shared_ptr<WorkerService::Stub>, std::string>>
GrpcPeerTransport::StubFor(int64_t worker) {
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
  }
  // Callers share ownership: a stub replaced by UpdatePeers stays alive until
  // its streams end.
  return std::make_pair(peer.stub, peer.address);
}

void GrpcPeerTransport::Send(OutgoingSlice slice, DoneCallback done) {
  std::vector<Job> jobs;
  jobs.push_back(Job{std::move(slice), std::move(done)});
  SendAll(std::move(jobs));
}

void GrpcPeerTransport::SendAll(std::vector<Job> jobs) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      for (Job& job : jobs) queue_.push_back(std::move(job));
      return;
    }
  }
  for (Job& job : jobs) job.done(absl::CancelledError("peer transport shutting down"));
}

std::vector<PeerTransport::Job> GrpcPeerTransport::TakeBatchLocked() {
  std::vector<Job> batch;
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  const int64_t peer = batch.front().slice.dst_worker;
  int64_t bytes = static_cast<int64_t>(batch.front().slice.bytes.size());
  std::deque<Job> rest;
  for (Job& job : queue_) {
    const int64_t size = static_cast<int64_t>(job.slice.bytes.size());
    if (job.slice.dst_worker == peer && bytes + size <= options_.max_batch_bytes) {
      bytes += size;
      batch.push_back(std::move(job));
    } else {
      rest.push_back(std::move(job));
    }
  }
  queue_.swap(rest);
  return batch;
}

void GrpcPeerTransport::SenderLoop() {
  while (true) {
    std::vector<Job> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      batch = TakeBatchLocked();
    }
    const absl::Status status = Push(batch);
    for (Job& job : batch) job.done(status);
  }
}

namespace {

// Writes `slice` as chunks of at most `chunk_bytes` (an empty slice is one
// empty chunk). False when the stream broke (Finish says why).
bool WriteSlice(grpc::ClientWriter<DataChunk>* writer, const OutgoingSlice& slice,
                int64_t chunk_bytes, int64_t* chunks) {
  const int64_t total = static_cast<int64_t>(slice.bytes.size());
  DataChunk chunk;
  chunk.set_request_id(slice.request_id);
  chunk.set_tag(slice.tag);
  chunk.set_dst_device(slice.dst_device);
  chunk.set_total_bytes(total);
  chunk.set_src_worker(slice.src_worker);
  chunk.set_dtype(static_cast<decltype(chunk.dtype())>(slice.dtype));
  int64_t offset = 0;
  do {
    const int64_t n = std::min(chunk_bytes, total - offset);
    chunk.set_offset(offset);
    chunk.set_data(slice.bytes.data() + offset, n);
    offset += n;
    if (!writer->Write(chunk)) return false;
    ++*chunks;
  } while (offset < total);
  return true;
}

}  // namespace

absl::Status GrpcPeerTransport::Push(const std::vector<Job>& batch) {
  const int64_t dst = batch.front().slice.dst_worker;
  MS_ASSIGN_OR_RETURN(auto stub_and_address, StubFor(dst));
  auto& [stub, address] = stub_and_address;
  const std::string peer = absl::StrCat("worker ", dst, " at ", address);
  grpc::ClientContext context;
  absl::Time deadline = absl::InfinitePast();
  for (const Job& job : batch) deadline = std::max(deadline, job.slice.deadline);
  if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
  PushAck ack;
  std::unique_ptr<grpc::ClientWriter<DataChunk>> writer = stub->PushData(&context, &ack);
  const int64_t chunk_bytes = std::max<int64_t>(1, options_.chunk_bytes);
  int64_t chunks = 0;
  size_t written = 0;  // whole slices
  while (written < batch.size() &&
         WriteSlice(writer.get(), batch[written].slice, chunk_bytes, &chunks)) {
    ++written;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  {
    absl::MutexLock lock(&mu_);
    chunks_sent_ += chunks;
    slices_sent_ += static_cast<int64_t>(written);
    ++streams_opened_;
  }
  if (!status.ok()) return AnnotateStatus(FromGrpcStatus(status), peer);
  if (written < batch.size()) {
    return Unavailable(peer, ": stream closed after ", written, " of ", batch.size(),
                       " slices");
  }
  return absl::OkStatus();
}

void GrpcPeerTransport::CancelOnPeer(int64_t worker, const std::string& request_id,
                                     const std::string& reason) {
  absl::StatusOr<std::pair<std::shared_ptr<WorkerService::Stub>, std::string>> stub =
      StubFor(worker);
  if (!stub.ok()) return;
  struct Call {
    std::shared_ptr<WorkerService::Stub> stub;  // alive until the call ends
    grpc::ClientContext context;
    CancelRequest request;
    CancelResponse response;
  };
  auto* call = new Call;
  call->stub = stub->first;
  call->request.set_request_id(request_id);
  call->request.set_reason(reason);
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  stub->first->async()->Cancel(&call->context, &call->request, &call->response,
                               [call](grpc::Status) { delete call; });
}

absl::Status GrpcPeerTransport::ReadParam(int64_t worker, const ReadParamIr& request,
                                          absl::Time deadline,
                                          const ParamChunkSink& on_chunk) {
  MS_ASSIGN_OR_RETURN(auto stub_and_address, StubFor(worker));
  auto& [stub, address] = stub_and_address;
  const std::string peer = absl::StrCat("worker ", worker, " at ", address);
  ReadParamRequest message;
  ReadParamFromIr(request, &message);
  // A connection to a peer that is busy (a scale step loads every worker at
  // once) can miss the channel's short connect timeout; the call fails with
  // UNAVAILABLE before any byte arrived. Then it is tried once more, waiting
  // for the connection (at most kConnectGrace, within the deadline).
  constexpr absl::Duration kConnectGrace = absl::Seconds(10);
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    absl::Time until = deadline;
    if (attempt > 0) {
      context.set_wait_for_ready(true);
      until = std::min(deadline, absl::Now() + kConnectGrace);
    }
    if (until != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(until));
    std::unique_ptr<grpc::ClientReader<ParamChunk>> reader = stub->ReadParam(&context, message);
    ParamChunk chunk;
    absl::Status sink_status;
    bool any = false;
    while (reader->Read(&chunk)) {
      any = true;
      sink_status = on_chunk(ParamChunkView{chunk.total_bytes(), chunk.offset(), chunk.data(),
                                            static_cast<int>(chunk.dtype())});
      if (!sink_status.ok()) {
        context.TryCancel();
        while (reader->Read(&chunk)) {
        }
        break;
      }
    }
    grpc::Status status = reader->Finish();
    if (!sink_status.ok()) return AnnotateStatus(sink_status, peer);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !any && attempt == 0) continue;
    if (!status.ok()) return AnnotateStatus(FromGrpcStatus(status), peer);
    return absl::OkStatus();
  }
}

int64_t GrpcPeerTransport::chunks_sent() const {
  absl::MutexLock lock(&mu_);
  return chunks_sent_;
}

int64_t GrpcPeerTransport::slices_sent() const {
  absl::MutexLock lock(&mu_);
  return slices_sent_;
}

int64_t GrpcPeerTransport::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

}  // namespace meshserve
