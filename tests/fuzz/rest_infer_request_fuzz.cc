// libFuzzer target: the KServe v2 REST infer request decoder
// (server/coordinator/http/rest_handlers.h: InferRequestFromJson) and the
// encoders a decoded request leads to. The input is a POST
// /v2/models/<model>/infer body.
// Invariants: never crashes or throws; every refusal is kInvalidArgument and
// its error reply is a 400 with a JSON body; an accepted request's inputs
// have a supported dtype and whole elements of it; the request limits and
// NamedTensor::Create refuse only with their documented codes, and an input
// Create accepts holds exactly dtype size x product(shape) bytes; the inputs
// encoded as a response (InferResponseToJson) are JSON and, when every value
// is finite, decode back to the same bytes (a response's outputs sent as a
// request's inputs).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/tensor/named_tensor.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/http/rest_handlers.h"
#include "server/coordinator/request_limits.h"

namespace {

using meshserve::DType;
using meshserve::NamedTensor;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool IsJson(absl::string_view text) { return nlohmann::json::accept(text.begin(), text.end()); }

void CheckRefusal(const absl::Status& status) {
  Check(status.code() == absl::StatusCode::kInvalidArgument);
  const meshserve::HttpReply reply = meshserve::ErrorReply(status);
  Check(reply.status == 400);
  Check(IsJson(reply.body));
}

// True when every element of `t` is a finite number (NaN and infinities
// encode as JSON null, which a request cannot carry).
bool AllFinite(const NamedTensor& t) {
  if (t.dtype == DType::kFloat64) {
    for (size_t i = 0; i + 8 <= t.bytes.size(); i += 8) {
      double d;
      std::memcpy(&d, t.bytes.data() + i, 8);
      if (!std::isfinite(d)) return false;
    }
    return true;
  }
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kBFloat16 && t.dtype != DType::kFloat16) {
    return true;
  }
  absl::StatusOr<std::vector<float>> values = t.ToFloat32();  // exact for these
  if (!values.ok()) return false;
  for (float v : *values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// The inputs as a response's outputs, encoded, then the outputs array sent
// back as a request's inputs: the same bytes.
void CheckRoundTrip(const meshserve::InferRequest& r) {
  meshserve::InferResponse response;
  response.model = r.model;
  response.id = r.id;
  bool finite = true;
  for (const NamedTensor& in : r.inputs) {
    response.outputs.push_back({in, "t"});
    finite = finite && AllFinite(in);
  }
  const std::string encoded = meshserve::InferResponseToJson(response);
  Check(IsJson(encoded));
  if (!finite) return;
  nlohmann::json j = nlohmann::json::parse(encoded);
  nlohmann::json request = {{"inputs", j["outputs"]}};
  absl::StatusOr<meshserve::InferRequest> again =
      meshserve::InferRequestFromJson(r.model, request.dump());
  Check(again.ok());
  Check(again->inputs.size() == r.inputs.size());
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    Check(again->inputs[i].name == r.inputs[i].name);
    Check(again->inputs[i].dtype == r.inputs[i].dtype);
    Check(again->inputs[i].bytes == r.inputs[i].bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<meshserve::InferRequest> r = meshserve::InferRequestFromJson("m", body);
  if (!r.ok()) {
    CheckRefusal(r.status());
    return 0;
  }
  Check(r->model == "m");
  for (const NamedTensor& in : r->inputs) {
    Check(meshserve::ParseDType(meshserve::DTypeWireName(in.dtype)).ok());
    Check(in.bytes.size() % meshserve::DTypeSize(in.dtype) == 0);
    absl::StatusOr<NamedTensor> made = NamedTensor::Create(in.name, in.dtype, in.shape, in.bytes);
    if (!made.ok()) {
      Check(made.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    int64_t n = meshserve::DTypeSize(in.dtype);
    for (int64_t d : in.shape) n *= d;
    Check(static_cast<int64_t>(in.bytes.size()) == n);
  }
  for (const auto& [name, spec] : r->out_shardings) Check(IsJson(nlohmann::json(spec).dump()));
  const absl::Status limits = meshserve::CheckRequestLimits(*r, {1 << 12, 1 << 10});
  Check(limits.ok() || limits.code() == absl::StatusCode::kResourceExhausted ||
        limits.code() == absl::StatusCode::kInvalidArgument);
  CheckRoundTrip(*r);
  return 0;
}
