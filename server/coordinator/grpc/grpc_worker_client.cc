#include "server/coordinator/grpc/grpc_worker_client.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/program/decode_step_proto.h"
#include "common/program/program_proto.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "common/rpc/zero_copy/param_chunk_reader.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "server/coordinator/grpc/execute_link.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_callback.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/worker_service.grpc.pb.h"

namespace meshserve {
namespace {

absl::Status Named(absl::Status s, const char* rpc, const std::string& address) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(rpc, " on ", address, ": ", s.message()));
}

void FillExecuteRequest(ExecuteCall call, ExecuteRequest* request) {
  request->set_program_id(std::move(call.program_id));
  request->set_request_id(std::move(call.request_id));
  request->set_deadline_ms(call.deadline_ms);
  request->set_param_version(call.param_version);
  request->set_param_cache(static_cast<ParamCache>(call.param_cache));
  if (call.decode != nullptr) DecodeStepToProto(*call.decode, request->mutable_decode());
  for (SliceIr& s : call.inputs) SliceFromIr(&s, request->add_inputs());  // moves bytes
}

// A pull reserves the box's bytes from the peer's total_bytes, at most this
// much (a wrong figure costs no more).
constexpr int64_t kMaxReserve = int64_t{1} << 31;

// WorkerService's params streams with their chunks as byte buffers
// (common/rpc/zero_copy/: bytes_field_wire.h, param_chunk_reader.h): a chunk's data is
// not copied into or out of a protobuf message. A plain value: a call is
// created from it and does not keep it.
constexpr char kStageParamsMethod[] = "/meshserve.WorkerService/StageParams";

// One client-streaming StageParams call; owns its context. Each chunk's data
// goes out as a slice over the chunk's own string.
class GrpcStageWriter : public StageParamsWriter {
 public:
  GrpcStageWriter(grpc::ChannelInterface* channel, absl::Duration timeout, std::string address)
      : address_(std::move(address)) {
    SetDeadline(&context_, timeout);
    writer_ = StartRawClientStream(channel, kStageParamsMethod, &context_, &response_);
  }
  ~GrpcStageWriter() override {
    if (!finished_) {
      context_.TryCancel();
      writer_->Finish().ok();  // reaps the call
    }
  }
  absl::Status Write(StageChunkIr chunk) override {
    if (broken_) return FailedPrecondition("StageParams on ", address_, ": stream ended");
    auto data = std::make_shared<std::string>(std::move(chunk.data));
    chunk.data.clear();
    StageParamChunk header;
    StageChunkFromIr(chunk, &header);
    const grpc::ByteBuffer message = EncodeWithBytesField(
        header.SerializeAsString(), StageParamChunk::kDataFieldNumber, *data, data);
    if (writer_->Write(message)) return absl::OkStatus();
    broken_ = true;  // the cause comes with Finish
    return Finish().status();
  }
  void Cancel() override { context_.TryCancel(); }
  absl::StatusOr<int64_t> Finish() override {
    if (finished_) return status_.ok() ? absl::StatusOr<int64_t>(response_.bytes()) : status_;
    finished_ = true;
    writer_->WritesDone();
    status_ = Named(FromGrpcStatus(writer_->Finish()), "StageParams", address_);
    if (!status_.ok()) return status_;
    return response_.bytes();
  }

 private:
  const std::string address_;
  grpc::ClientContext context_;
  StageParamsResponse response_;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer_;
  bool broken_ = false;
  bool finished_ = false;
  absl::Status status_;
};

class GrpcWorkerClient : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)),
        channel_(std::move(channel)),
        stub_(WorkerService::NewStub(channel_)) {}
  ~GrpcWorkerClient() override {
    absl::MutexLock lock(&link_mu_);
    if (link_ != nullptr) link_->Close();  // its calls fail; it goes when the stream has
  }

  // A READY channel whose transport closes goes IDLE (or, once a call tries
  // to reconnect, CONNECTING / TRANSIENT_FAILURE): any state but READY after
  // READY is a drop. GetState(false) does not start a connection.
  bool ConnectionDropped() override {
    if (channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
      was_ready_.store(true, std::memory_order_relaxed);
      return false;
    }
    return was_ready_.exchange(false, std::memory_order_relaxed);
  }

  absl::StatusOr<LoadModelResultIr> LoadModel(const LoadModelIr& call,
                                              absl::Duration timeout) override {
    LoadModelRequest request;
    LoadModelFromIr(call, &request);
    LoadModelResponse response;
    absl::Status s = Call(&WorkerService::Stub::LoadModel, request, &response, timeout, "LoadModel");
    if (!s.ok()) return s;
    return LoadModelResultIr{response.param_bytes(), response.bytes_fetched(),
                             response.bytes_local()};
  }

  absl::Status UnloadModel(const std::string& model, int64_t generation, int64_t version,
                           absl::Duration timeout) override {
    return VersionCall<UnloadModelResponse>(&WorkerService::Stub::UnloadModel, model,
                                            generation, version, timeout, "UnloadModel");
  }

  absl::StatusOr<std::string> ReadParam(const ReadParamIr& call,
                                        absl::Duration timeout) override {
    ReadParamRequest request;
    ReadParamFromIr(call, &request);
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    std::string bytes;
    const ParamReadOutcome read = ReadParamChunks(
        channel_.get(), &context, request, [&](const ParamChunkPiece& piece) -> absl::Status {
          if (piece.offset != static_cast<int64_t>(bytes.size())) {
            return Internal("chunks of param '", call.param, "' out of order");
          }
          if (bytes.empty()) {
            bytes.reserve(static_cast<size_t>(std::clamp<int64_t>(piece.total_bytes, 0, kMaxReserve)));
          }
          bytes.append(piece.data.data(), piece.data.size());
          return absl::OkStatus();
        });
    if (!read.chunks.ok()) return Named(read.chunks, "ReadParam", address_);
    MS_RETURN_IF_ERROR(Named(read.call, "ReadParam", address_));
    return bytes;
  }

  absl::StatusOr<std::unique_ptr<StageParamsWriter>> StageParams(
      absl::Duration timeout) override {
    return std::unique_ptr<StageParamsWriter>(
        std::make_unique<GrpcStageWriter>(channel_.get(), timeout, address_));
  }

  absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& call,
                                              absl::Duration timeout) override {
    CommitParamsRequest request;
    CommitParamsFromIr(call, &request);
    CommitParamsResponse response;
    absl::Status s =
        Call(&WorkerService::Stub::CommitParams, request, &response, timeout, "CommitParams");
    if (!s.ok()) return s;
    return CommitResultIr{response.param_bytes(), response.bytes_fetched()};
  }

  absl::Status AbortParams(const std::string& model, int64_t generation, int64_t version,
                           absl::Duration timeout) override {
    return VersionCall<AbortParamsResponse>(&WorkerService::Stub::AbortParams, model,
                                            generation, version, timeout, "AbortParams");
  }

  // The one place a compiled program is serialized (into the request).
  absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) override {
    InstallProgramRequest request;
    ProgramFromIr(program, request.mutable_program());
    InstallProgramResponse response;
    return Call(&WorkerService::Stub::InstallProgram, request, &response, timeout, "InstallProgram");
  }

  absl::Status UninstallProgram(const std::string& program_id, absl::Duration timeout) override {
    UninstallProgramRequest request;
    request.set_program_id(program_id);
    UninstallProgramResponse response;
    return Call(&WorkerService::Stub::UninstallProgram, request, &response, timeout,
                "UninstallProgram");
  }

  absl::Status ReleaseSequences(const std::string& model, int64_t generation,
                                const std::vector<int64_t>& seqs,
                                absl::Duration timeout) override {
    ReleaseSequencesRequest request;
    request.set_model(model);
    request.set_generation(generation);
    for (int64_t seq : seqs) request.add_seqs(seq);
    ReleaseSequencesResponse response;
    return Call(&WorkerService::Stub::ReleaseSequences, request, &response, timeout,
                "ReleaseSequences");
  }

  absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                        absl::Duration timeout) override {
    ExecuteRequest request;
    FillExecuteRequest(std::move(call), &request);
    ExecuteResponse response;
    absl::Status s = Call(&WorkerService::Stub::Execute, request, &response, timeout, "Execute");
    if (!s.ok()) return s;
    return TakeExecuteResult(&response);
  }

  // The callback API: no thread waits for the call; `done` runs on a gRPC
  // thread when the response (or the failure) arrives.
  void ExecuteAsync(ExecuteCall call, absl::Duration timeout, ExecuteDone done) override {
    const bool small = call.small;
    auto request = std::make_unique<ExecuteRequest>();
    FillExecuteRequest(std::move(call), request.get());
    if (small && Link()->Send(&request, timeout, &done)) return;
    struct Pending {
      grpc::ClientContext context;
      ExecuteRequest request;
      ExecuteResponse response;
      ExecuteDone done;
    };
    auto* pending = new Pending;
    pending->done = std::move(done);
    pending->request.Swap(request.get());
    SetDeadline(&pending->context, timeout);
    // `done` holds the client (coordinator_infer.cc), so address_ outlives the call.
    stub_->async()->Execute(
        &pending->context, &pending->request, &pending->response,
        [pending, this](grpc::Status status) {
          std::unique_ptr<Pending> owned(pending);
          absl::Status s = Named(FromGrpcStatus(status), "Execute", address_);
          if (!s.ok()) {
            owned->done(std::move(s));
            return;
          }
          owned->done(TakeExecuteResult(&owned->response));
        });
  }

  absl::Status Cancel(const std::string& request_id, const std::string& reason,
                      absl::Duration timeout) override {
    CancelRequest request;
    request.set_request_id(request_id);
    request.set_reason(reason);
    CancelResponse response;
    return Call(&WorkerService::Stub::Cancel, request, &response, timeout, "Cancel");
  }

  absl::StatusOr<WorkerStatusIr> Status(absl::Duration timeout) override {
    WorkerStatusRequest request;
    WorkerStatusResponse response;
    absl::Status s = Call(&WorkerService::Stub::Status, request, &response, timeout, "Status");
    if (!s.ok()) return s;
    return WorkerStatusFromProto(response);
  }

 private:
  // One unary call with `timeout`; a failure names the RPC and the worker.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (WorkerService::Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                    const Request& request, Response* response, absl::Duration timeout,
                    const char* rpc) {
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    return Named(FromGrpcStatus((stub_.get()->*method)(&context, request, response)), rpc,
                 address_);
  }

  // A call whose request names only (model, generation, version).
  template <typename Response, typename Request>
  absl::Status VersionCall(grpc::Status (WorkerService::Stub::*method)(grpc::ClientContext*,
                                                                       const Request&, Response*),
                           const std::string& model, int64_t generation, int64_t version,
                           absl::Duration timeout, const char* rpc) {
    Request request;
    request.set_model(model);
    request.set_generation(generation);
    request.set_version(version);
    Response response;
    return Call(method, request, &response, timeout, rpc);
  }

  // The ExecuteStream for small calls (execute_link.h): opened on first use
  // and again after it ended.
  std::shared_ptr<ExecuteLink> Link() ABSL_LOCKS_EXCLUDED(link_mu_) {
    absl::MutexLock lock(&link_mu_);
    if (link_ == nullptr || link_->ended()) link_ = ExecuteLink::Open(stub_.get(), address_);
    return link_;
  }

  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<WorkerService::Stub> stub_;
  std::atomic<bool> was_ready_{false};
  absl::Mutex link_mu_;
  std::shared_ptr<ExecuteLink> link_ ABSL_GUARDED_BY(link_mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<WorkerClient>> CreateGrpcWorkerClient(
    const std::string& address, const ChannelOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(address, options);
  if (!channel.ok()) return channel.status();
  return std::shared_ptr<WorkerClient>(
      std::make_shared<GrpcWorkerClient>(address, *std::move(channel)));
}

WorkerClientFactory GrpcWorkerClientFactory(ChannelOptions options) {
  return [options](int64_t, const std::string& address) {
    return CreateGrpcWorkerClient(address, options);
  };
}

}  // namespace meshserve
