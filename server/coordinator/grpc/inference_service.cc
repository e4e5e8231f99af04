#include "server/coordinator/grpc/inference_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"

namespace meshserve {
namespace {

template <typename T>
std::string BytesOf(const T& repeated) {
  std::string out(repeated.size() * sizeof(typename T::value_type), '\0');
  if (!out.empty()) std::memcpy(out.data(), repeated.data(), out.size());
  return out;
}

template <typename To, typename T>
std::string NarrowedBytesOf(const T& repeated) {
  std::string out(repeated.size() * sizeof(To), '\0');
  for (int i = 0; i < repeated.size(); ++i) {
    const To v = static_cast<To>(repeated.Get(i));
    std::memcpy(out.data() + i * sizeof(To), &v, sizeof(To));
  }
  return out;
}

// Typed contents -> raw bytes of `dtype`.
absl::StatusOr<std::string> TypedContents(const std::string& name, DType dtype,
                                          const inference::InferTensorContents& c) {
  switch (dtype) {
    case DType::kFloat32: return BytesOf(c.fp32_contents());
    case DType::kFloat64: return BytesOf(c.fp64_contents());
    case DType::kInt32: return BytesOf(c.int_contents());
    case DType::kInt64: return BytesOf(c.int64_contents());
    case DType::kInt8: return NarrowedBytesOf<int8_t>(c.int_contents());
    case DType::kUInt8: return NarrowedBytesOf<uint8_t>(c.uint_contents());
    case DType::kBool: return NarrowedBytesOf<uint8_t>(c.bool_contents());
    default:
      return InvalidArgument("input '", name, "': datatype ", DTypeWireName(dtype),
                             " can only be sent as raw_input_contents");
  }
}

}  // namespace

absl::StatusOr<InferRequest> InferRequestFromProto(inference::ModelInferRequest* mutable_proto) {
  const inference::ModelInferRequest& proto = *mutable_proto;
  InferRequest r;
  r.model = proto.model_name();
  r.id = proto.id();
  const bool raw = proto.raw_input_contents_size() > 0;
  if (raw && proto.raw_input_contents_size() != proto.inputs_size()) {
    return InvalidArgument("raw_input_contents has ", proto.raw_input_contents_size(),
                           " entries for ", proto.inputs_size(), " inputs");
  }
  for (int i = 0; i < proto.inputs_size(); ++i) {
    const auto& in = proto.inputs(i);
    NamedTensor input;
    input.name = in.name();
    MS_ASSIGN_OR_RETURN(input.dtype, ParseDType(in.datatype()), "input '", in.name(), "'");
    input.shape.assign(in.shape().begin(), in.shape().end());
    if (raw) {
      if (in.has_contents()) {
        return InvalidArgument("input '", in.name(),
                               "': contents given with raw_input_contents");
      }
      input.bytes = std::move(*mutable_proto->mutable_raw_input_contents(i));
    } else {
      MS_ASSIGN_OR_RETURN(input.bytes, TypedContents(in.name(), input.dtype, in.contents()));
    }
    r.inputs.push_back(std::move(input));
  }
  for (const auto& out : proto.outputs()) {
    r.requested_outputs.push_back(out.name());
    auto it = out.parameters().find("out_sharding");
    if (it == out.parameters().end()) continue;
    if (it->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
      return InvalidArgument("output '", out.name(),
                             "': parameter out_sharding must be a string_param");
    }
    r.out_shardings[out.name()] = it->second.string_param();
  }
  return r;
}

void InferResponseToProto(InferResponse response, inference::ModelInferResponse* proto) {
  proto->set_model_name(response.model);
  proto->set_model_version("1");
  proto->set_id(response.id);
  if (response.param_version > 0) {
    (*proto->mutable_parameters())["param_version"].set_int64_param(response.param_version);
  }
  if (response.batch_size > 0) {  // a batched model (batcher.h)
    (*proto->mutable_parameters())["batch_size"].set_int64_param(response.batch_size);
    (*proto->mutable_parameters())["queue_us"].set_int64_param(response.queue_us);
  }
  for (InferOutput& out : response.outputs) {
    auto* o = proto->add_outputs();
    o->set_name(out.tensor.name);
    o->set_datatype(std::string(DTypeWireName(out.tensor.dtype)));
    for (int64_t d : out.tensor.shape) o->add_shape(d);
    (*o->mutable_parameters())["type"].set_string_param(out.type_str);
    (*o->mutable_parameters())["generation"].set_int64_param(response.generation);
    proto->add_raw_output_contents(std::move(out.tensor.bytes));
  }
}

grpc::Status InferenceService::ServerLive(grpc::ServerContext* context,
                                          const inference::ServerLiveRequest*,
                                          inference::ServerLiveResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  response->set_live(true);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerReady(grpc::ServerContext* context,
                                           const inference::ServerReadyRequest*,
                                           inference::ServerReadyResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  response->set_ready(coordinator_->IsReady());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelReady(grpc::ServerContext* context,
                                          const inference::ModelReadyRequest* request,
                                          inference::ModelReadyResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(request->name());
  if (!status.ok()) return ToGrpcStatus(status.status());
  response->set_ready(status->ready);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerMetadata(grpc::ServerContext* context,
                                              const inference::ServerMetadataRequest*,
                                              inference::ServerMetadataResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  response->set_name("meshserve");
  response->set_version("0.1.0");
  response->add_extensions("out_sharding");
  response->add_extensions("meshserve.ClusterService");
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelMetadata(grpc::ServerContext* context,
                                             const inference::ModelMetadataRequest* request,
                                             inference::ModelMetadataResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(request->name());
  if (!status.ok()) return ToGrpcStatus(status.status());
  if (status->model == nullptr) {
    return ToGrpcStatus(FailedPrecondition("model '", request->name(),
                                           "' cannot be served: ", status->error.message()));
  }
  const ModelFile& model = *status->model;
  response->set_name(model.name);
  response->add_versions(absl::StrCat(std::max<int64_t>(1, status->version)));
  response->set_platform("meshserve_jax");
  for (const InputDef& in : model.inputs) {
    auto* t = response->add_inputs();
    t->set_name(in.name);
    t->set_datatype(std::string(DTypeWireName(in.dtype)));
    for (int64_t d : in.shape) t->add_shape(d);
  }
  for (const std::string& out : model.outputs) {
    auto* t = response->add_outputs();
    t->set_name(out);
    t->set_datatype(std::string(DTypeWireName(model.dtype)));
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context, const inference::ModelInferRequest* request,
    inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  absl::StatusOr<InferRequest> core =
      pass.ok()
          // The request message belongs to this call and is not used again:
          // its input bytes move into the core request instead of being copied.
          ? InferRequestFromProto(const_cast<inference::ModelInferRequest*>(request))
          : absl::StatusOr<InferRequest>(pass.status());
  if (core.ok()) core = CheckedForCoordinator(*std::move(core), context->deadline());
  if (!core.ok()) {
    reactor->Finish(ToGrpcStatus(core.status()));
    return reactor;
  }
  // The pass ends just before the call does (edge_auth.h): once finished,
  // the server may stop and take the gate with it.
  auto held = std::make_shared<std::optional<CallGate::Pass>>(*std::move(pass));
  coordinator_->InferAsync(*std::move(core),
                           [reactor, response, held](absl::StatusOr<InferResponse> result) {
                             held->reset();
                             if (!result.ok()) {
                               reactor->Finish(ToGrpcStatus(result.status()));
                               return;
                             }
                             InferResponseToProto(*std::move(result), response);
                             reactor->Finish(grpc::Status::OK);
                           });
  return reactor;
}

absl::StatusOr<InferRequest> InferenceService::CheckedForCoordinator(
    InferRequest core, std::chrono::system_clock::time_point deadline) const {
  MS_RETURN_IF_ERROR(CheckRequestLimits(core, edge_.limits));
  const absl::Duration left = TimeLeftUntil(deadline);
  if (left != absl::InfiniteDuration()) {
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("deadline expired before the request");
    }
    core.timeout = left;
  }
  return core;
}

}  // namespace meshserve
