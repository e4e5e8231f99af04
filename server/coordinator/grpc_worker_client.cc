#include "server/coordinator/grpc_worker_client.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "proto/worker_service.grpc.pb.h"

namespace meshserve {
namespace {

template <typename BoxMsg>
void ToProtoBox(const WireBox& box, BoxMsg* out) {
  for (int64_t b : box.begin) out->add_begin(b);
  for (int64_t e : box.end) out->add_end(e);
}

template <typename SliceMsg>
void ToProtoSlice(const WireSlice& s, SliceMsg* out) {
  out->set_name(s.name);
  out->set_device(s.device);
  ToProtoBox(s.box, out->mutable_box());
  using Enum = std::remove_cv_t<std::remove_reference_t<decltype(out->dtype())>>;
  out->set_dtype(static_cast<Enum>(s.dtype));
  out->set_data(s.data);
}

template <typename SliceMsg>
WireSlice FromProtoSlice(SliceMsg* s) {
  WireSlice out;
  out.name = s->name();
  out.device = s->device();
  out.box.begin.assign(s->box().begin().begin(), s->box().begin().end());
  out.box.end.assign(s->box().end().begin(), s->box().end().end());
  out.dtype = static_cast<int32_t>(s->dtype());
  out.data = std::move(*s->mutable_data());
  return out;
}

class GrpcWorkerClient : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)), stub_(WorkerService::NewStub(channel)) {}

  absl::StatusOr<int64_t> LoadModel(const LoadModelCall& call,
                                    absl::Duration timeout) override {
    LoadModelRequest request;
    request.set_model(call.model);
    request.set_generation(call.generation);
    request.set_model_json(call.model_json);
    request.set_model_dir(call.model_dir);
    for (const WireMeshAxis& a : call.mesh) {
      auto* axis = request.mutable_mesh()->add_axes();
      axis->set_name(a.name);
      axis->set_size(a.size);
      axis->set_type(a.type);
    }
    for (int64_t d : call.devices) request.add_devices(d);
    for (int64_t w : call.device_workers) request.add_device_workers(w);
    for (const auto& [id, addr] : call.worker_addresses) {
      (*request.mutable_worker_addresses())[id] = addr;
    }
    LoadModelResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    absl::Status s = Check(stub_->LoadModel(&context, request, &response), "LoadModel");
    if (!s.ok()) return s;
    return response.param_bytes();
  }

  absl::Status UnloadModel(const std::string& model, int64_t generation,
                           absl::Duration timeout) override {
    UnloadModelRequest request;
    request.set_model(model);
    request.set_generation(generation);
    UnloadModelResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    return Check(stub_->UnloadModel(&context, request, &response), "UnloadModel");
  }

  absl::Status InstallProgram(const std::string& serialized_program,
                              absl::Duration timeout) override {
    InstallProgramRequest request;
    if (!request.mutable_program()->ParseFromString(serialized_program)) {
      return absl::InternalError("InstallProgram: the program does not parse");
    }
    InstallProgramResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    return Check(stub_->InstallProgram(&context, request, &response), "InstallProgram");
  }

  absl::StatusOr<ExecuteResult> Execute(const ExecuteCall& call,
                                        absl::Duration timeout) override {
    ExecuteRequest request;
    request.set_program_id(call.program_id);
    request.set_request_id(call.request_id);
    request.set_deadline_ms(call.deadline_ms);
    for (const WireSlice& s : call.inputs) ToProtoSlice(s, request.add_inputs());
    ExecuteResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    absl::Status s = Check(stub_->Execute(&context, request, &response), "Execute");
    if (!s.ok()) return s;
    ExecuteResult result;
    for (auto& slice : *response.mutable_outputs()) {
      result.outputs.push_back(FromProtoSlice(&slice));
    }
    return result;
  }

  absl::Status Cancel(const std::string& request_id, const std::string& reason,
                      absl::Duration timeout) override {
    CancelRequest request;
    request.set_request_id(request_id);
    request.set_reason(reason);
    CancelResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    return Check(stub_->Cancel(&context, request, &response), "Cancel");
  }

  absl::StatusOr<WorkerStatusResult> Status(absl::Duration timeout) override {
    WorkerStatusRequest request;
    WorkerStatusResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, timeout);
    absl::Status s = Check(stub_->Status(&context, request, &response), "Status");
    if (!s.ok()) return s;
    WorkerStatusResult out;
    out.worker_id = response.worker_id();
    out.address = response.address();
    out.blas_core = response.blas_core();
    out.blas_config = response.blas_config();
    out.blas_threads = response.blas_threads();
    for (const auto& m : response.models()) {
      out.models.push_back({m.model(), m.generation(),
                            std::vector<int64_t>(m.devices().begin(), m.devices().end()),
                            m.param_bytes()});
    }
    out.programs = response.programs();
    out.requests_served = response.requests_served();
    return out;
  }

 private:
  absl::Status Check(const grpc::Status& status, const char* rpc) const {
    absl::Status s = FromGrpcStatus(status);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(rpc, " on ", address_, ": ", s.message()));
  }

  const std::string address_;
  std::unique_ptr<WorkerService::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<WorkerClient>> CreateGrpcWorkerClient(
    const std::string& address) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(address);
  if (!channel.ok()) return channel.status();
  return std::shared_ptr<WorkerClient>(
      std::make_shared<GrpcWorkerClient>(address, *std::move(channel)));
}

WorkerClientFactory GrpcWorkerClientFactory() {
  return [](int64_t, const std::string& address) { return CreateGrpcWorkerClient(address); };
}

}  // namespace meshserve
