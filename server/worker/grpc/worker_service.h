// WorkerService (proto/worker_service.proto) over gRPC's callback API, over
// the worker's transport-free core, WorkerEngine (server/worker/worker_engine.h;
// the step semantics and error codes: server/worker/README.md). Each handler parses the request message into
// the program IR (common/program/program_proto.h), calls the engine and
// encodes its reply; blocking work runs on the worker's ThreadPool (reactors
// never block: LoadModel reads checkpoints and peers), the Status goes out
// through ToGrpcStatus (common/rpc).
// Execute calls WorkerEngine::ExecuteAsync on the reactor's thread
// (ExecuteMessage, execute_stream.h): a quick program runs there and on the
// threads that deliver its peers' slices (a receive that waits holds no
// thread), a long one on the pool (WorkerEngine::Options::executor).
// PushData is a read reactor that hands each DataChunk to the rendezvous as it
// arrives (one copy, in place) and acknowledges the count at the end; a bad
// chunk ends the stream with the receiver's error. PeerStream, a long-lived
// bidi stream from a peer's transport, delivers its messages the same way; a
// bad chunk there cancels only its request (the stream serves others).
// ReadParam takes the box's bytes (a view of the held buffer, or a copy) on
// the process's ElasticExecutor (common/base/elastic_executor.h), not on the
// gRPC thread and not on the fixed pool: a pool busy with LoadModels waiting
// for peers' ReadParams must not block them, and the elastic executor never
// queues a task behind busy threads; it writes the bytes in 1 MiB ParamChunks
// without copying them. StageParams stages each chunk as it arrives, as
// PushData does; CommitParams (which reads fills from peers) and AbortParams
// run on the pool.
//
// StartWorkerServer binds host:port (port 0 picks a free one) with message
// size limits raised (ConfigureServerBuilder: 1 GiB), enables the
// grpc.health.v1 service (SERVING while the server runs, for Kubernetes' gRPC
// probes) and server reflection (grpcurl-style listing), and returns the
// server and the bound port.
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_WORKER_GRPC_WORKER_SERVICE_H_
#define MESHSERVE_SERVER_WORKER_GRPC_WORKER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "proto/worker_service.grpc.pb.h"
#include "common/base/thread_pool.h"
#include "server/worker/worker_engine.h"

namespace meshserve {

// WorkerService::CallbackService with ReadParam and StageParams raw (their
// chunks' data is not copied through protobuf, common/rpc/zero_copy/bytes_field_wire.h:
// ReadParam's ParamChunks are written as byte buffers over the held bytes,
// StageParams' chunks are staged from views into the received slices; the
// wire form is unchanged): the generated chain with the raw classes in place
// of WithCallbackMethod_ReadParam/_StageParams, which they would otherwise
// hide (clang's -Woverloaded-virtual). A method added to the proto is added
// here too (else it answers UNIMPLEMENTED). ReleaseSequences is in the chain
// without a handler yet (it answers UNIMPLEMENTED, and the coordinator then
// frees sequences with a decode step of its own): the handler needs the
// engine's KvCacheStore (WorkerEngine does not expose it yet).
using WorkerServiceBase = WorkerService::WithCallbackMethod_LoadModel<
    WorkerService::WithCallbackMethod_UnloadModel<WorkerService::WithCallbackMethod_InstallProgram<
        WorkerService::WithCallbackMethod_UninstallProgram<
            WorkerService::WithCallbackMethod_Execute<WorkerService::WithCallbackMethod_ExecuteStream<
            WorkerService::WithCallbackMethod_PushData<WorkerService::WithCallbackMethod_PeerStream<
                WorkerService::WithCallbackMethod_Cancel<WorkerService::WithCallbackMethod_Status<
                    WorkerService::WithRawCallbackMethod_ReadParam<
                        WorkerService::WithRawCallbackMethod_StageParams<
                            WorkerService::WithCallbackMethod_CommitParams<
                                WorkerService::WithCallbackMethod_AbortParams<
                                    WorkerService::WithCallbackMethod_ReleaseSequences<
                                        WorkerService::Service>>>>>>>>>>>>>>>;

class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  // `worker` and `pool` are not owned and must outlive the service.
  WorkerServiceImpl(WorkerEngine* worker, ThreadPool* pool) : worker_(worker), pool_(pool) {}

  // The address reported by Status (what peers use).
  void set_address(std::string address);

  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* context,
                                      const LoadModelRequest* request,
                                      LoadModelResponse* response) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* context,
                                        const UnloadModelRequest* request,
                                        UnloadModelResponse* response) override;
  grpc::ServerUnaryReactor* InstallProgram(grpc::CallbackServerContext* context,
                                           const InstallProgramRequest* request,
                                           InstallProgramResponse* response) override;
  grpc::ServerUnaryReactor* UninstallProgram(grpc::CallbackServerContext* context,
                                             const UninstallProgramRequest* request,
                                             UninstallProgramResponse* response) override;
  // Frees generation sequences' KV cache blocks (no program runs).
  grpc::ServerUnaryReactor* ReleaseSequences(grpc::CallbackServerContext* context,
                                             const ReleaseSequencesRequest* request,
                                             ReleaseSequencesResponse* response) override;
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context,
                                    const ExecuteRequest* request,
                                    ExecuteResponse* response) override;
  grpc::ServerBidiReactor<ExecuteRequest, ExecuteStreamReply>* ExecuteStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerReadReactor<DataChunk>* PushData(grpc::CallbackServerContext* context,
                                               PushAck* response) override;
  grpc::ServerBidiReactor<DataChunk, PushAck>* PeerStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const CancelRequest* request,
                                   CancelResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const WorkerStatusRequest* request,
                                   WorkerStatusResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadParam(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* StageParams(grpc::CallbackServerContext* context,
                                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CommitParams(grpc::CallbackServerContext* context,
                                         const CommitParamsRequest* request,
                                         CommitParamsResponse* response) override;
  grpc::ServerUnaryReactor* AbortParams(grpc::CallbackServerContext* context,
                                        const AbortParamsRequest* request,
                                        AbortParamsResponse* response) override;

 private:
  WorkerEngine* const worker_;
  ThreadPool* const pool_;
  absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
};

// One DataChunk of PushData or PeerStream (not its `more`) into the engine's
// rendezvous (WorkerEngine::DeliverChunk). \error the rendezvous's.
absl::Status DeliverDataChunk(WorkerEngine* engine, const DataChunk& chunk);

struct WorkerServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Starts WorkerService with grpc.health.v1 and reflection (see the top of the
// file) on `credentials` (null: insecure; with --tls_dir
// RpcSecurity::MemberOnlyServerCredentials: members only, every service).
// \error kUnavailable naming host:port when it cannot be bound.
absl::StatusOr<WorkerServer> StartWorkerServer(
    WorkerServiceImpl* service, absl::string_view host, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_WORKER_SERVICE_H_
