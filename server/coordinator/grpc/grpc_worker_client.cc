#include "server/coordinator/grpc/grpc_worker_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/program/program_proto.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "proto/worker_service.grpc.pb.h"

namespace meshserve {
namespace {

class GrpcWorkerClient : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)), stub_(WorkerService::NewStub(channel)) {}

  absl::StatusOr<int64_t> LoadModel(const LoadModelIr& call,
                                    absl::Duration timeout) override {
    LoadModelRequest request;
    LoadModelFromIr(call, &request);
    LoadModelResponse response;
    absl::Status s = Call(&WorkerService::Stub::LoadModel, request, &response, timeout, "LoadModel");
    if (!s.ok()) return s;
    return response.param_bytes();
  }

  absl::Status UnloadModel(const std::string& model, int64_t generation,
                           absl::Duration timeout) override {
    UnloadModelRequest request;
    request.set_model(model);
    request.set_generation(generation);
    UnloadModelResponse response;
    return Call(&WorkerService::Stub::UnloadModel, request, &response, timeout, "UnloadModel");
  }

  // The one place a compiled program is serialized (into the request).
  absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) override {
    InstallProgramRequest request;
    ProgramFromIr(program, request.mutable_program());
    InstallProgramResponse response;
    return Call(&WorkerService::Stub::InstallProgram, request, &response, timeout, "InstallProgram");
  }

  absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                        absl::Duration timeout) override {
    ExecuteRequest request;
    request.set_program_id(call.program_id);
    request.set_request_id(call.request_id);
    request.set_deadline_ms(call.deadline_ms);
    for (SliceIr& s : call.inputs) SliceFromIr(&s, request.add_inputs());  // moves bytes
    ExecuteResponse response;
    absl::Status s = Call(&WorkerService::Stub::Execute, request, &response, timeout, "Execute");
    if (!s.ok()) return s;
    ExecuteResult result;
    for (auto& slice : *response.mutable_outputs()) {
      result.outputs.push_back(SliceToIr(&slice));
    }
    return result;
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
    absl::Status s = FromGrpcStatus((stub_.get()->*method)(&context, request, response));
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(rpc, " on ", address_, ": ", s.message()));
  }

  const std::string address_;
  std::unique_ptr<WorkerService::Stub> stub_;
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
