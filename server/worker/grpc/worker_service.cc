#include "server/worker/grpc/worker_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/elastic_executor.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/metrics/metric_registry.h"
#include "common/program/program_proto.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/security/server_credentials.h"
#include "server/worker/grpc/execute_stream.h"

namespace meshserve {
namespace {

// This process's worker metrics (GlobalMetricRegistry: worker_main serves it).
struct WorkerMetrics {
  MetricRegistry& r = GlobalMetricRegistry();
  Counter& calls = r.AddCounter("meshserve_worker_calls_total",
                                "WorkerService calls by method and result.", {"method", "result"});
  Histogram& seconds = r.AddHistogram(
      "meshserve_worker_call_duration_seconds",
      "WorkerService call time by method (Execute: the program's GEMMs and transfers).",
      {"method"});
  Counter& received_bytes = r.AddCounter("meshserve_worker_received_bytes_total",
                                         "Slice bytes received from peer workers (PushData).");
};
WorkerMetrics& Metrics() {
  static WorkerMetrics* const metrics = new WorkerMetrics();
  return *metrics;
}
// Registered at start-up, so /metrics lists the families before the first call.
[[maybe_unused]] const WorkerMetrics& registered_at_start = Metrics();

// Counts and times a call of `method` that began at `start`.
void Record(const char* method, absl::Time start, const absl::Status& status) {
  Metrics().calls.Increment({method, status.ok() ? "ok" : "error"});
  Metrics().seconds.Observe({method}, absl::ToDoubleSeconds(absl::Now() - start));
}

// `work`, counted and timed as `method`.
template <typename Work>
absl::Status Measured(const char* method, Work& work) {
  const absl::Time start = absl::Now();
  absl::Status status = work();
  Record(method, start, status);
  return status;
}

// Runs `work` on the pool and finishes the call with its status.
template <typename Work>
grpc::ServerUnaryReactor* RunOnPool(grpc::CallbackServerContext* context, ThreadPool* pool,
                                    const char* method, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pool->Schedule([reactor, method, work = std::move(work)]() mutable {
    reactor->Finish(ToGrpcStatus(Measured(method, work)));
  });
  return reactor;
}

// Hands a peer's message -- one chunk, or several whole small slices (`more`)
// -- to the rendezvous and counts its bytes. The first rejected chunk is
// returned (the rest not delivered); with `isolate` it fails only its own
// request here instead (a shared PeerStream) and the others are delivered.
absl::Status DeliverMessage(WorkerEngine* worker, const DataChunk& message, bool isolate) {
  int64_t bytes = 0;
  absl::Status first;
  auto deliver = [&](const DataChunk& chunk) {
    absl::Status status = DeliverDataChunk(worker, chunk);
    bytes += static_cast<int64_t>(chunk.data().size());
    if (status.ok()) return true;
    if (!isolate) {
      first = std::move(status);
      return false;
    }
    worker->Fail(chunk.request_id(), std::move(status));
    return true;
  };
  if (deliver(message)) {
    for (const DataChunk& more : message.more()) {
      if (!deliver(more)) break;
    }
  }
  if (first.ok()) Metrics().received_bytes.Increment({}, bytes);
  return first;
}

// Receives one PushData stream, chunk by chunk, straight into the rendezvous.
class PushDataReactor final : public grpc::ServerReadReactor<DataChunk> {
 public:
  PushDataReactor(WorkerEngine* worker, PushAck* ack) : worker_(worker), ack_(ack) {
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished writing (or the stream broke)
      ack_->set_chunks(chunks_);
      Finish(grpc::Status::OK);
      return;
    }
    absl::Status status = DeliverMessage(worker_, chunk_, /*isolate=*/false);
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    chunks_ += 1 + chunk_.more_size();
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  WorkerEngine* const worker_;
  PushAck* const ack_;
  DataChunk chunk_;
  int64_t chunks_ = 0;
};

// Receives a long-lived PeerStream: each message as PushData's. A chunk the
// rendezvous rejects fails its request here with that error (the receives
// report it: e.g. kResourceExhausted over the slice budget); the
// stream, shared by other requests, goes on.
class PeerStreamReactor final : public grpc::ServerBidiReactor<DataChunk, PushAck> {
 public:
  explicit PeerStreamReactor(WorkerEngine* worker) : worker_(worker) { StartRead(&chunk_); }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the sender ended the stream (or it broke)
      Finish(grpc::Status::OK);
      return;
    }
    DeliverMessage(worker_, chunk_, /*isolate=*/true).IgnoreError();  // never fails
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  WorkerEngine* const worker_;
  DataChunk chunk_;
};

// A server stream refused before it began: finishes with `status` at once.
class RefusedWriteReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedWriteReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// Streams one box of a held param in ParamChunks (an empty box: one chunk).
class ReadParamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  static constexpr int64_t kChunkBytes = int64_t{1} << 20;

  // The read (a copy when the box is part of a cell) runs on the shared
  // ElasticExecutor: a gRPC thread busy with it for long could not serve
  // other calls, nor the handshakes of peers connecting to this worker; and
  // the worker's ThreadPool may be full of LoadModels that wait for peers'
  // ReadParams (the elastic executor starts a thread rather than queue).
  ReadParamReactor(WorkerEngine* worker, ReadParamIr request) {
    ElasticExecutor::Shared().Schedule([this, worker, request = std::move(request)]() {
      absl::StatusOr<ParamBytes> read = worker->ReadParam(request);
      Metrics().calls.Increment({"ReadParam", read.ok() ? "ok" : "error"});
      if (!read.ok()) {
        Finish(ToGrpcStatus(read.status()));
        return;
      }
      bytes_ = std::move(*read);
      WriteNext();
    });
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "ReadParam stream broke"));
    } else if (offset_ >= static_cast<int64_t>(bytes_.bytes.size())) {
      Finish(grpc::Status::OK);
    } else {
      WriteNext();
    }
  }
  void OnDone() override { delete this; }

 private:
  // Each ParamChunk's data is a slice over the held bytes (bytes_field_wire.h),
  // which keep_alive keeps for as long as gRPC holds the slice.
  void WriteNext() {
    const int64_t total = static_cast<int64_t>(bytes_.bytes.size());
    const int64_t n = std::min(kChunkBytes, total - offset_);
    ParamChunk header;
    header.set_total_bytes(total);
    header.set_offset(offset_);
    header.set_dtype(static_cast<DTypeProto>(DTypeToProto(bytes_.dtype)));
    chunk_ = EncodeWithBytesField(header.SerializeAsString(), ParamChunk::kDataFieldNumber,
                                  bytes_.bytes.substr(offset_, n), bytes_.keep_alive);
    offset_ += n;
    StartWrite(&chunk_);
  }

  ParamBytes bytes_;
  grpc::ByteBuffer chunk_;
  int64_t offset_ = 0;
};

// Receives one StageParams stream, staging each chunk as it arrives, from
// views into its received slices (bytes_field_wire.h).
class StageParamsReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  StageParamsReactor(WorkerEngine* worker, grpc::ByteBuffer* response)
      : worker_(worker), response_(response), epoch_(worker->StagingEpoch()) {
    StartRead(&message_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      StageParamsResponse answer;
      answer.set_bytes(bytes_);
      grpc::Slice slice(answer.SerializeAsString());
      grpc::ByteBuffer buffer(&slice, 1);
      response_->Swap(&buffer);
      Metrics().calls.Increment({"StageParams", "ok"});
      MS_LOG(INFO) << "StageParams: " << bytes_ << " bytes in " << chunks_
                   << " chunks, first after " << absl::ToDoubleSeconds(first_ - start_)
                   << " s, stream " << absl::ToDoubleSeconds(absl::Now() - start_)
                   << " s (staging " << staging_s_ << " s)";
      Finish(grpc::Status::OK);
      return;
    }
    const absl::Time t = absl::Now();
    if (chunks_++ == 0) first_ = t;
    absl::StatusOr<int64_t> staged = Stage();
    message_.Clear();
    staging_s_ += absl::ToDoubleSeconds(absl::Now() - t);
    if (!staged.ok()) {
      Metrics().calls.Increment({"StageParams", "error"});
      Finish(ToGrpcStatus(staged.status()));
      return;
    }
    bytes_ += *staged;
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  // Stages the message just read (chunk number chunks_ - 1, from 0).
  absl::StatusOr<int64_t> Stage() {
    const int64_t index = chunks_ - 1;
    MS_RETURN_IF_ERROR(SplitBytesField(message_, StageParamChunk::kDataFieldNumber, &split_),
                       "StageParams chunk ", index);
    StageParamChunk header;
    if (!header.ParseFromString(split_.other_fields)) {
      return InvalidArgument("StageParams chunk ", index, " is not a StageParamChunk");
    }
    StageChunkIr chunk = StageChunkToIr(&header);
    chunk.data_views = split_.data;
    return worker_->StageParams(chunk, epoch_);
  }

  WorkerEngine* const worker_;
  grpc::ByteBuffer* const response_;
  // Aborts after this one drop this stream's later chunks for that version.
  const int64_t epoch_;
  grpc::ByteBuffer message_;
  BytesFieldSplit split_;
  int64_t bytes_ = 0;
  int64_t chunks_ = 0;
  const absl::Time start_ = absl::Now();
  absl::Time first_ = start_;
  double staging_s_ = 0;  // in StageChunk (the copies into the staging)
};

}  // namespace

absl::Status DeliverDataChunk(WorkerEngine* engine, const DataChunk& chunk) {
  MS_ASSIGN_OR_RETURN(auto dtype, OptionalDTypeFromProto(chunk.dtype()), "chunk ", chunk.tag());
  return engine->DeliverChunk(chunk.request_id(), chunk.tag(), chunk.total_bytes(),
                              chunk.offset(), chunk.data(), chunk.src_worker(), dtype);
}

void WorkerServiceImpl::set_address(std::string address) {
  absl::MutexLock lock(&mu_);
  address_ = std::move(address);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::LoadModel(grpc::CallbackServerContext* context,
                                                       const LoadModelRequest* request,
                                                       LoadModelResponse* response) {
  return RunOnPool(context, pool_, "LoadModel", [this, request, response]() -> absl::Status {
    MS_ASSIGN_OR_RETURN(LoadModelResultIr result, worker_->LoadModel(LoadModelToIr(*request)));
    response->set_param_bytes(result.param_bytes);
    response->set_bytes_fetched(result.bytes_fetched);
    response->set_bytes_local(result.bytes_local);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::UnloadModel(grpc::CallbackServerContext* context,
                                                         const UnloadModelRequest* request,
                                                         UnloadModelResponse* response) {
  return RunOnPool(context, pool_, "UnloadModel", [this, request]() {
    return worker_->UnloadModel(request->model(), request->generation(), request->version());
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::InstallProgram(
    grpc::CallbackServerContext* context, const InstallProgramRequest* request,
    InstallProgramResponse* response) {
  return RunOnPool(context, pool_, "InstallProgram", [this, request]() -> absl::Status {
    MS_ASSIGN_OR_RETURN(ProgramIr program, ProgramToIr(request->program()));
    return worker_->InstallProgram(std::move(program));
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::UninstallProgram(
    grpc::CallbackServerContext* context, const UninstallProgramRequest* request,
    UninstallProgramResponse* response) {
  return RunOnPool(context, pool_, "UninstallProgram",
                   [this, request] { return worker_->UninstallProgram(request->program_id()); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ReleaseSequences(
    grpc::CallbackServerContext* context, const ReleaseSequencesRequest* request,
    ReleaseSequencesResponse*) {
  return RunOnPool(context, pool_, "ReleaseSequences", [this, request] {
    worker_->ReleaseSequences(request->model(), request->generation(),
                              {request->seqs().begin(), request->seqs().end()});
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Execute(grpc::CallbackServerContext* context,
                                                     const ExecuteRequest* request,
                                                     ExecuteResponse* response) {
  // On this thread: the core hands a long program to the pool itself, and a
  // receive that waits returns the thread (WorkerEngine::ExecuteAsync).
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time start = absl::Now();
  // The request message belongs to this call and is not otherwise used:
  // the core moves the input bytes out of it instead of copying them.
  ExecuteMessage(worker_, const_cast<ExecuteRequest*>(request), response,
                 [reactor, start](absl::Status status) {
                   Record("Execute", start, status);
                   reactor->Finish(ToGrpcStatus(status));
                 }, start + TimeLeftUntil(context->deadline()));  // the call's deadline too
  return reactor;
}

grpc::ServerBidiReactor<ExecuteRequest, ExecuteStreamReply>* WorkerServiceImpl::ExecuteStream(
    grpc::CallbackServerContext* context) {
  return new ExecuteStreamReactor(worker_, [](absl::Time start, const absl::Status& status) {
    Record("Execute", start, status);
  });
}

grpc::ServerReadReactor<DataChunk>* WorkerServiceImpl::PushData(
    grpc::CallbackServerContext* context, PushAck* response) {
  return new PushDataReactor(worker_, response);
}

grpc::ServerBidiReactor<DataChunk, PushAck>* WorkerServiceImpl::PeerStream(
    grpc::CallbackServerContext* context) {
  return new PeerStreamReactor(worker_);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                    const CancelRequest* request,
                                                    CancelResponse* response) {
  worker_->Cancel(request->request_id(), request->reason());  // wakes its receives at once
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

// WorkerServiceImpl::Status is in worker_status.cc.

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerServiceImpl::ReadParam(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  ReadParamRequest parsed;
  grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes it
  grpc::Status s = grpc::SerializationTraits<ReadParamRequest>::Deserialize(&copy, &parsed);
  if (!s.ok()) {
    return new RefusedWriteReactor(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("ReadParam: unreadable request: ", s.error_message())));
  }
  return new ReadParamReactor(worker_, ReadParamToIr(parsed));
}

grpc::ServerReadReactor<grpc::ByteBuffer>* WorkerServiceImpl::StageParams(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new StageParamsReactor(worker_, response);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::CommitParams(grpc::CallbackServerContext* context,
                                                          const CommitParamsRequest* request,
                                                          CommitParamsResponse* response) {
  return RunOnPool(context, pool_, "CommitParams", [this, request, response]() {
    const absl::Time start = absl::Now();
    absl::StatusOr<CommitResultIr> result = worker_->CommitParams(CommitParamsToIr(*request));
    if (result.ok()) {
      response->set_param_bytes(result->param_bytes);
      response->set_bytes_fetched(result->bytes_fetched);
    }
    MS_LOG(INFO) << "CommitParams of model '" << request->model() << "' version "
                 << request->version() << " (" << request->fills_size() << " fills, "
                 << response->bytes_fetched() << " bytes fetched): "
                 << absl::ToDoubleSeconds(absl::Now() - start) << " s";
    return result.status();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AbortParams(grpc::CallbackServerContext* context,
                                                         const AbortParamsRequest* request,
                                                         AbortParamsResponse* response) {
  return RunOnPool(context, pool_, "AbortParams", [this, request]() {
    return worker_->AbortParams(request->model(), request->generation(), request->version());
  });
}

absl::StatusOr<WorkerServer> StartWorkerServer(
    WorkerServiceImpl* service, absl::string_view host, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  WorkerServer out;
  const std::string address = absl::StrCat(
      absl::StrContains(host, ":") ? absl::StrCat("[", host, "]") : std::string(host), ":",
      port);
  // grpc.health.v1 (SERVING while the server runs: Kubernetes' grpc probes)
  // and server reflection (grpcurl-style listing).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder);
  builder.AddListeningPort(address, credentials, &out.port);
  builder.RegisterService(service);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return Unavailable("cannot listen on ", address);
  }
  return out;
}

}  // namespace meshserve
