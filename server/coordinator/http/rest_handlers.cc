#include "server/coordinator/http/rest_handlers.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/bfloat16.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using Json = nlohmann::json;

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
absl::Status AppendInteger(const Json& v, std::string* out) {
  if (!v.is_number_integer()) return InvalidArgument("expected an integer, got ", v.dump());
  const bool is_unsigned = v.is_number_unsigned();
  if ((is_unsigned && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) ||
      (!is_unsigned && (v.get<int64_t>() < std::numeric_limits<T>::min() ||
                        v.get<int64_t>() > std::numeric_limits<T>::max()))) {
    return InvalidArgument(v.dump(), " is out of range");
  }
  Append(out, static_cast<T>(is_unsigned ? static_cast<int64_t>(v.get<uint64_t>())
                                         : v.get<int64_t>()));
  return absl::OkStatus();
}

// One JSON element -> its bytes in `dtype`.
absl::Status AppendElement(const Json& v, DType dtype, std::string* out) {
  if (dtype == DType::kBool) {
    if (!v.is_boolean()) return InvalidArgument("expected true or false, got ", v.dump());
    Append<uint8_t>(out, v.get<bool>() ? 1 : 0);
    return absl::OkStatus();
  }
  switch (dtype) {
    case DType::kInt8: return AppendInteger<int8_t>(v, out);
    case DType::kUInt8: return AppendInteger<uint8_t>(v, out);
    case DType::kInt32: return AppendInteger<int32_t>(v, out);
    case DType::kInt64: return AppendInteger<int64_t>(v, out);
    default: break;
  }
  if (!v.is_number()) return InvalidArgument("expected a number, got ", v.dump());
  const double d = v.get<double>();
  switch (dtype) {
    case DType::kFloat32: Append(out, static_cast<float>(d)); break;
    case DType::kFloat64: Append(out, d); break;
    case DType::kBFloat16: Append(out, FloatToBFloat16(static_cast<float>(d))); break;
    case DType::kFloat16: Append(out, FloatToHalf(static_cast<float>(d))); break;
    default: return InvalidArgument("datatype ", DTypeWireName(dtype), " is not supported");
  }
  return absl::OkStatus();
}

// Row-major bytes of `data`, a flat or nested JSON array.
absl::Status AppendData(const Json& data, DType dtype, std::string* out) {
  if (!data.is_array()) return AppendElement(data, dtype, out);
  for (const Json& v : data) MS_RETURN_IF_ERROR(AppendData(v, dtype, out));
  return absl::OkStatus();
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Raw bytes of `dtype` -> a flat JSON array.
Json DataToJson(DType dtype, const std::string& bytes) {
  Json out = Json::array();
  const int64_t size = DTypeSize(dtype);
  for (size_t i = 0; i + size <= bytes.size(); i += size) {
    const char* p = bytes.data() + i;
    switch (dtype) {
      case DType::kFloat32: out.push_back(Load<float>(p)); break;
      case DType::kFloat64: out.push_back(Load<double>(p)); break;
      case DType::kBFloat16: out.push_back(BFloat16ToFloat(Load<uint16_t>(p))); break;
      case DType::kFloat16: out.push_back(HalfToFloat(Load<uint16_t>(p))); break;
      case DType::kInt8: out.push_back(Load<int8_t>(p)); break;
      case DType::kUInt8: out.push_back(Load<uint8_t>(p)); break;
      case DType::kInt32: out.push_back(Load<int32_t>(p)); break;
      case DType::kInt64: out.push_back(Load<int64_t>(p)); break;
      case DType::kBool: out.push_back(Load<uint8_t>(p) != 0); break;
      default: return out;
    }
  }
  return out;
}

absl::StatusOr<NamedTensor> InputFromJson(const Json& in) {
  if (!in.is_object() || !in.contains("name") || !in["name"].is_string()) {
    return InvalidArgument("each input needs a string \"name\"");
  }
  NamedTensor input;
  input.name = in["name"].get<std::string>();
  if (!in.contains("datatype") || !in["datatype"].is_string()) {
    return InvalidArgument("input '", input.name, "': a string \"datatype\" is required");
  }
  MS_ASSIGN_OR_RETURN(input.dtype, ParseDType(in["datatype"].get<std::string>()), "input '",
                      input.name, "'");
  if (!in.contains("shape") || !in["shape"].is_array()) {
    return InvalidArgument("input '", input.name, "': an integer array \"shape\" is required");
  }
  for (const Json& d : in["shape"]) {
    if (!d.is_number_integer()) {
      return InvalidArgument("input '", input.name, "': shape entry ", d.dump(),
                             " is not an integer");
    }
    input.shape.push_back(d.get<int64_t>());
  }
  if (!in.contains("data")) return InvalidArgument("input '", input.name, "': no \"data\"");
  MS_RETURN_IF_ERROR(AppendData(in["data"], input.dtype, &input.bytes), "input '", input.name,
                     "' data");
  return input;
}

absl::Status OutputsFromJson(const Json& outputs, InferRequest* r) {
  if (!outputs.is_array()) return InvalidArgument("\"outputs\" must be an array");
  for (const Json& out : outputs) {
    if (!out.is_object() || !out.contains("name") || !out["name"].is_string()) {
      return InvalidArgument("each requested output needs a string \"name\"");
    }
    const std::string name = out["name"].get<std::string>();
    r->requested_outputs.push_back(name);
    if (!out.contains("parameters") || !out["parameters"].contains("out_sharding")) continue;
    const Json& spec = out["parameters"]["out_sharding"];
    if (!spec.is_string()) {
      return InvalidArgument("output '", name, "': parameter out_sharding must be a string");
    }
    r->out_shardings[name] = spec.get<std::string>();
  }
  return absl::OkStatus();
}

HttpReply JsonReply(int status, const Json& body) { return {status, body.dump()}; }

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kFailedPrecondition: return 412;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

HttpReply ErrorReply(const absl::Status& status) {
  return JsonReply(HttpStatusFor(status.code()), Json{{"error", std::string(status.message())}});
}

absl::StatusOr<InferRequest> InferRequestFromJson(absl::string_view model,
                                                  absl::string_view body) {
  const Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("request body is not a JSON object");
  }
  InferRequest r;
  r.model = std::string(model);
  if (j.contains("id")) {
    if (!j["id"].is_string()) return InvalidArgument("\"id\" must be a string");
    r.id = j["id"].get<std::string>();
  }
  if (!j.contains("inputs") || !j["inputs"].is_array()) {
    return InvalidArgument("\"inputs\" must be an array");
  }
  for (const Json& in : j["inputs"]) {
    MS_ASSIGN_OR_RETURN(NamedTensor input, InputFromJson(in));
    r.inputs.push_back(std::move(input));
  }
  if (j.contains("outputs")) MS_RETURN_IF_ERROR(OutputsFromJson(j["outputs"], &r));
  return r;
}

std::string InferResponseToJson(const InferResponse& response) {
  Json outputs = Json::array();
  for (const InferOutput& out : response.outputs) {
    outputs.push_back({{"name", out.tensor.name},
                       {"datatype", std::string(DTypeWireName(out.tensor.dtype))},
                       {"shape", out.tensor.shape},
                       {"parameters", {{"type", out.type_str},
                                       {"generation", response.generation}}},
                       {"data", DataToJson(out.tensor.dtype, out.tensor.bytes)}});
  }
  Json j = {{"model_name", response.model}, {"model_version", "1"}, {"outputs", outputs}};
  if (!response.id.empty()) j["id"] = response.id;
  return j.dump();
}

HttpReply RestHandlers::Live() const { return JsonReply(200, {{"live", true}}); }

HttpReply RestHandlers::Ready() const {
  const bool ready = coordinator_->IsReady();
  return JsonReply(ready ? 200 : 400, {{"ready", ready}});
}

HttpReply RestHandlers::ServerMetadata() const {
  return JsonReply(200, {{"name", "meshserve"},
                         {"version", "0.1.0"},
                         {"extensions", {"out_sharding", "meshserve.ClusterService"}}});
}

HttpReply RestHandlers::ModelMetadata(const std::string& model) const {
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(model);
  if (!status.ok()) return ErrorReply(status.status());
  if (status->model == nullptr) {
    return ErrorReply(FailedPrecondition("model '", model, "' cannot be served: ",
                                         status->error.message()));
  }
  const ModelFile& m = *status->model;
  Json inputs = Json::array();
  for (const InputDef& in : m.inputs) {
    inputs.push_back({{"name", in.name},
                      {"datatype", std::string(DTypeWireName(in.dtype))},
                      {"shape", in.shape}});
  }
  Json outputs = Json::array();
  for (const std::string& out : m.outputs) {
    outputs.push_back({{"name", out}, {"datatype", std::string(DTypeWireName(m.dtype))}});
  }
  return JsonReply(200, {{"name", m.name},
                         {"versions", {std::to_string(std::max<int64_t>(1, status->version))}},
                         {"platform", "meshserve_jax"},
                         {"inputs", inputs},
                         {"outputs", outputs}});
}

HttpReply RestHandlers::ModelReady(const std::string& model) const {
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(model);
  if (!status.ok()) return ErrorReply(status.status());
  return JsonReply(status->ready ? 200 : 400, {{"name", model}, {"ready", status->ready}});
}

HttpReply RestHandlers::Infer(const std::string& model, absl::string_view body) const {
  absl::StatusOr<InferRequest> request = InferRequestFromJson(model, body);
  if (!request.ok()) return ErrorReply(request.status());
  if (absl::Status over = CheckRequestLimits(*request, limits_); !over.ok()) {
    HttpReply reply = ErrorReply(over);
    reply.status = 413;  // Payload Too Large: the limit, not a transient overload
    return reply;
  }
  absl::StatusOr<InferResponse> response = coordinator_->Infer(*request);
  if (!response.ok()) return ErrorReply(response.status());
  return {200, InferResponseToJson(*response)};
}

}  // namespace meshserve
