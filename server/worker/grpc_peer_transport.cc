#include "server/worker/grpc_peer_transport.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
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
    MS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                        CreateChannel(peer.address, options_.channel),
                        "worker ", worker);
    peer.stub = std::shared_ptr<WorkerService::Stub>(WorkerService::NewStub(channel));
  }
  // Callers share ownership: a stub replaced by UpdatePeers stays alive until
  // its streams end.
  return std::make_pair(peer.stub, peer.address);
}

void GrpcPeerTransport::Send(OutgoingSlice slice, DoneCallback done) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    done(absl::CancelledError("peer transport shutting down"));
    return;
  }
  queue_.push_back(Job{std::move(slice), std::move(done)});
}

void GrpcPeerTransport::SenderLoop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = Push(job.slice);
    job.done(std::move(status));
  }
}

absl::Status GrpcPeerTransport::Push(const OutgoingSlice& slice) {
  MS_ASSIGN_OR_RETURN(auto stub_and_address, StubFor(slice.dst_worker));
  auto& [stub, address] = stub_and_address;
  const std::string peer = absl::StrCat("worker ", slice.dst_worker, " at ", address);
  grpc::ClientContext context;
  if (slice.deadline != absl::InfiniteFuture()) {
    context.set_deadline(absl::ToChronoTime(slice.deadline));
  }
  PushAck ack;
  std::unique_ptr<grpc::ClientWriter<DataChunk>> writer = stub->PushData(&context, &ack);
  const int64_t total = static_cast<int64_t>(slice.bytes.size());
  const int64_t chunk_bytes = std::max<int64_t>(1, options_.chunk_bytes);
  int64_t offset = 0, chunks = 0;
  DataChunk chunk;
  chunk.set_request_id(slice.request_id);
  chunk.set_tag(slice.tag);
  chunk.set_dst_device(slice.dst_device);
  chunk.set_total_bytes(total);
  chunk.set_src_worker(slice.src_worker);
  chunk.set_dtype(static_cast<decltype(chunk.dtype())>(slice.dtype));
  do {
    const int64_t n = std::min(chunk_bytes, total - offset);
    chunk.set_offset(offset);
    chunk.set_data(slice.bytes.data() + offset, n);
    if (!writer->Write(chunk)) break;  // the stream broke: Finish says why
    offset += n;
    ++chunks;
  } while (offset < total);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  {
    absl::MutexLock lock(&mu_);
    chunks_sent_ += chunks;
  }
  if (!status.ok()) return AnnotateStatus(FromGrpcStatus(status), peer);
  if (offset < total) return Unavailable(peer, ": stream closed after ", offset, " of ", total, " bytes");
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

int64_t GrpcPeerTransport::chunks_sent() const {
  absl::MutexLock lock(&mu_);
  return chunks_sent_;
}

}  // namespace meshserve
