#include "client/inference_client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"

namespace meshserve {
namespace client {
namespace {

// ModelInfer with the request as a byte buffer (InferMovingInputs).
// A plain value: a call is created from it and does not keep it.
constexpr char kModelInferMethod[] = "/inference.GRPCInferenceService/ModelInfer";

// A grpc::Status as an absl::Status (common/rpc's single conversion point:
// the code is kept), prefixed with the RPC and target.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view rpc,
                      absl::string_view target) {
  return AnnotateStatus(FromGrpcStatus(status), rpc, " on ", target);
}

template <typename T, typename Repeated>
std::string PackRepeated(const Repeated& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  for (int i = 0; i < values.size(); ++i) {
    T value = static_cast<T>(values.Get(i));
    std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
  }
  return bytes;
}

std::string NextRequestId() {
  static std::atomic<int64_t> counter{0};
  return absl::StrCat(getpid(), "-", counter.fetch_add(1));
}

}  // namespace

absl::StatusOr<NamedTensor> DecodeOutputTensor(
    const inference::ModelInferResponse::InferOutputTensor& output, std::string* raw) {
  absl::StatusOr<DType> dtype = ParseDType(output.datatype());
  if (!dtype.ok()) {
    return Internal("output '", output.name(), "': unknown datatype '",
                    output.datatype(), "'");
  }
  std::vector<int64_t> shape(output.shape().begin(), output.shape().end());
  std::string bytes;
  if (raw != nullptr) {
    bytes = std::move(*raw);
  } else {
    const auto& contents = output.contents();
    switch (*dtype) {
      case DType::kFloat32:
        bytes = PackRepeated<float>(contents.fp32_contents());
        break;
      case DType::kFloat64:
        bytes = PackRepeated<double>(contents.fp64_contents());
        break;
      case DType::kInt32:
        bytes = PackRepeated<int32_t>(contents.int_contents());
        break;
      case DType::kInt64:
        bytes = PackRepeated<int64_t>(contents.int64_contents());
        break;
      default:
        return Internal("output '", output.name(), "': ", output.datatype(),
                        " sent without raw_output_contents");
    }
  }
  absl::StatusOr<NamedTensor> tensor =
      NamedTensor::Create(output.name(), *dtype, std::move(shape), std::move(bytes));
  if (!tensor.ok()) {
    return Internal("malformed reply: ", tensor.status().message());
  }
  return tensor;
}

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&body, "[") || absl::ConsumePrefix(&body, "(")) {
    if (!absl::ConsumeSuffix(&body, "]") && !absl::ConsumeSuffix(&body, ")")) {
      return InvalidArgument("shape '", text, "': unbalanced bracket");
    }
  }
  std::vector<int64_t> dims;
  if (absl::StripAsciiWhitespace(body).empty()) {
    return InvalidArgument("shape '", text, "': no dims");
  }
  for (absl::string_view part : absl::StrSplit(body, absl::ByAnyChar(",x"))) {
    int64_t dim;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0) {
      return InvalidArgument("shape '", text, "': dim '", part,
                             "' is not an integer >= 0");
    }
    dims.push_back(dim);
  }
  return dims;
}

absl::StatusOr<std::unique_ptr<InferenceClient>> InferenceClient::Create(
    absl::string_view target, const Options& options) {
  ChannelOptions channel_options;
  channel_options.max_message_bytes = options.max_message_bytes;
  channel_options.initial_reconnect_backoff_ms = options.reconnect_backoff_ms;
  channel_options.min_reconnect_backoff_ms = options.reconnect_backoff_ms;
  channel_options.max_reconnect_backoff_ms = options.reconnect_backoff_ms;
  channel_options.credentials = options.credentials;
  channel_options.server_name_override = options.server_name_override;
  channel_options.bearer_token = options.bearer_token;
  MS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      CreateChannel(target, channel_options));
  return std::unique_ptr<InferenceClient>(new InferenceClient(
      std::string(target), channel, inference::GRPCInferenceService::NewStub(channel),
      ClusterService::NewStub(channel)));
}

absl::StatusOr<inference::ModelMetadataResponse> InferenceClient::ModelMetadata(
    absl::string_view model, absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  inference::ModelMetadataRequest request;
  request.set_name(std::string(model));
  inference::ModelMetadataResponse response;
  MS_RETURN_IF_ERROR(
      FromGrpc(infer_stub_->ModelMetadata(&context, request, &response),
               "ModelMetadata", target_));
  return response;
}

absl::StatusOr<std::vector<std::string>> InferenceClient::OutputNames(
    absl::string_view model, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto it = output_names_.find(std::string(model));
    if (it != output_names_.end()) return it->second;
  }
  MS_ASSIGN_OR_RETURN(inference::ModelMetadataResponse metadata,
                      ModelMetadata(model, deadline));
  std::vector<std::string> names;
  for (const auto& output : metadata.outputs()) names.push_back(output.name());
  absl::MutexLock lock(&mu_);
  output_names_[std::string(model)] = names;
  return names;
}

namespace {

// The reply of ModelInfer: the outputs' bytes move from the received slices
// into their own strings as they are read (bytes_field_wire.h), not parsed
// into a second copy.
absl::StatusOr<InferResult> ResultFromReply(grpc::ByteBuffer reply, const std::string& target) {
  std::string other_fields;
  std::vector<std::string> raw_outputs;
  if (absl::Status split = SplitRepeatedBytesField(
          &reply, inference::ModelInferResponse::kRawOutputContentsFieldNumber, &other_fields,
          &raw_outputs);
      !split.ok()) {
    return Internal("malformed reply from ", target, ": ", split.message());
  }
  inference::ModelInferResponse response;
  if (!response.ParseFromString(other_fields)) {
    return Internal("malformed reply from ", target, ": not a ModelInferResponse");
  }
  const bool raw = !raw_outputs.empty();
  if (raw && static_cast<int>(raw_outputs.size()) != response.outputs_size()) {
    return Internal("malformed reply from ", target, ": ", response.outputs_size(),
                    " outputs but ", raw_outputs.size(), " raw_output_contents");
  }
  InferResult result;
  result.model = response.model_name();
  result.id = response.id();
  auto size = response.parameters().find("batch_size");
  auto queue = response.parameters().find("queue_us");
  if (size != response.parameters().end()) result.batch_size = size->second.int64_param();
  if (queue != response.parameters().end()) result.queue_us = queue->second.int64_param();
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    InferOutput out;
    MS_ASSIGN_OR_RETURN(out.tensor,
                        DecodeOutputTensor(output, raw ? &raw_outputs[i] : nullptr));
    for (const auto& [key, value] : output.parameters()) {
      if (value.parameter_choice_case() == inference::InferParameter::kStringParam) {
        out.parameters[key] = value.string_param();
      }
    }
    result.outputs.push_back(std::move(out));
  }
  return result;
}

}  // namespace

absl::StatusOr<InferResult> InferenceClient::Infer(
    absl::string_view model, absl::Span<const NamedTensor> inputs,
    const std::map<std::string, std::string>& out_shardings,
    absl::Time deadline) {
  std::vector<NamedTensor> copies(inputs.begin(), inputs.end());
  return InferMovingInputs(model, absl::MakeSpan(copies), out_shardings, deadline);
}

absl::StatusOr<InferResult> InferenceClient::InferMovingInputs(
    absl::string_view model, absl::Span<NamedTensor> inputs,
    const std::map<std::string, std::string>& out_shardings, absl::Time deadline) {
  inference::ModelInferRequest request;  // all but raw_input_contents
  request.set_model_name(std::string(model));
  request.set_id(NextRequestId());
  // The inputs' bytes go out as slices over these strings, not copied into
  // the message nor into gRPC's buffers (common/rpc/zero_copy/bytes_field_wire.h).
  auto contents = std::make_shared<std::vector<std::string>>();
  contents->reserve(inputs.size());
  for (NamedTensor& input : inputs) {
    // Re-validates: a NamedTensor is a plain struct anyone can fill in.
    int64_t expected = input.NumElements() * DTypeSize(input.dtype);
    if (static_cast<int64_t>(input.bytes.size()) != expected) {
      return InvalidArgument("input '", input.name, "': ", DTypeName(input.dtype),
                             ShapeToCompactString(input.shape), " needs ", expected,
                             " bytes, got ", input.bytes.size());
    }
    auto* tensor = request.add_inputs();
    tensor->set_name(input.name);
    tensor->set_datatype(std::string(DTypeWireName(input.dtype)));
    for (int64_t dim : input.shape) tensor->add_shape(dim);
    contents->push_back(std::move(input.bytes));
  }
  if (!out_shardings.empty()) {
    MS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        OutputNames(model, deadline));
    for (const auto& [name, spec] : out_shardings) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);  // the server names the unknown output
      }
    }
    for (const std::string& name : names) {
      auto* output = request.add_outputs();
      output->set_name(name);
      auto it = out_shardings.find(name);
      if (it != out_shardings.end()) {
        (*output->mutable_parameters())["out_sharding"].set_string_param(it->second);
      }
    }
  }
  const std::vector<absl::string_view> views(contents->begin(), contents->end());
  grpc::ByteBuffer message = EncodeWithBytesFields(
      request.SerializeAsString(), inference::ModelInferRequest::kRawInputContentsFieldNumber,
      views, contents);
  contents.reset();  // the message's slices hold the bytes now
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  grpc::ByteBuffer reply;
  MS_RETURN_IF_ERROR(FromGrpc(RawUnaryCall(channel_.get(), kModelInferMethod, &context, message,
                                           &reply),
                              "ModelInfer", target_));
  message.Clear();  // frees the inputs' bytes now (unless gRPC still holds a slice)
  return ResultFromReply(std::move(reply), target_);
}

absl::StatusOr<DescribeResponse> InferenceClient::Describe(
    absl::string_view model,
    const std::map<std::string, std::vector<int64_t>>& input_shapes,
    absl::Time deadline) {
  DescribeRequest request;
  request.set_model(std::string(model));
  for (const auto& [name, dims] : input_shapes) {
    ShapeProto& shape = (*request.mutable_input_shapes())[name];
    for (int64_t dim : dims) shape.add_dims(dim);
  }
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  DescribeResponse response;
  MS_RETURN_IF_ERROR(FromGrpc(cluster_stub_->Describe(&context, request, &response),
                              "Describe", target_));
  return response;
}

absl::StatusOr<ClusterStatusResponse> InferenceClient::Status(absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  ClusterStatusResponse response;
  MS_RETURN_IF_ERROR(FromGrpc(
      cluster_stub_->Status(&context, ClusterStatusRequest(), &response), "Status",
      target_));
  return response;
}

absl::Status InferenceClient::WaitReady(absl::Time deadline, absl::string_view model,
                                        absl::Duration poll) {
  std::string last = "no answer yet";
  while (true) {
    absl::Time attempt_deadline = std::min(deadline, absl::Now() + absl::Seconds(2));
    grpc::ClientContext context;
    SetDeadlineAt(&context, attempt_deadline);
    inference::ServerReadyResponse ready;
    grpc::Status status =
        infer_stub_->ServerReady(&context, inference::ServerReadyRequest(), &ready);
    if (!status.ok()) {
      last = FromGrpc(status, "ServerReady", target_).ToString();
    } else if (!ready.ready()) {
      last = "server not ready";
    } else if (model.empty()) {
      return absl::OkStatus();
    } else {
      grpc::ClientContext model_context;
      SetDeadlineAt(&model_context, attempt_deadline);
      inference::ModelReadyRequest request;
      request.set_name(std::string(model));
      inference::ModelReadyResponse model_ready;
      status = infer_stub_->ModelReady(&model_context, request, &model_ready);
      if (status.ok() && model_ready.ready()) return absl::OkStatus();
      last = status.ok() ? absl::StrCat("model '", model, "' not ready")
                         : FromGrpc(status, "ModelReady", target_).ToString();
    }
    if (absl::Now() + poll >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("server ", target_, " not ready before the deadline: ", last));
    }
    absl::SleepFor(poll);
  }
}

}  // namespace client
}  // namespace meshserve
