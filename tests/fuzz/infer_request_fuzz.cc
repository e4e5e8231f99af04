// libFuzzer target: OIP ModelInferRequest decoding on the coordinator. The
// input is the request's wire bytes: parsed as inference.ModelInferRequest,
// converted by InferRequestFromProto (server/coordinator/grpc) and checked by
// ValidateInferRequest (server/coordinator/infer_request.h) against a fixed
// model with a request-set dim, as the InferenceService's ModelInfer does.
// Invariants: never crashes; every failure is kInvalidArgument; a request the
// model accepts has, for each input, exactly dtype size x product(shape) bytes
// and the model's rank.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "proto/inference.pb.h"
#include "server/coordinator/grpc/inference_service.h"
#include "server/coordinator/infer_request.h"

namespace {

constexpr char kModelJson[] = R"({
  "name": "mm", "mesh": {"x": 2}, "dtype": "float32", "seed": 7,
  "inputs": {"x": {"shape": [-1, 8], "sharding": [null, "x"]},
             "ids": {"shape": [4], "sharding": [null], "dtype": "int32"}},
  "params": {"w": {"shape": [8, 6], "sharding": ["x", null], "init": "normal"},
             "table": {"shape": [16, 6], "sharding": [null, null], "init": "normal"}},
  "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "w",
              "out_sharding": ["x", null]},
             {"name": "e", "op": "embed", "input": "ids", "table": "table"}],
  "outputs": ["y", "e"]})";

std::shared_ptr<const meshserve::ModelFile> Model() {
  static const auto* model = [] {
    auto parsed = meshserve::ParseModelFile(kModelJson, "/nonexistent-model-dir");
    if (!parsed.ok()) __builtin_trap();  // the harness's own model
    return new std::shared_ptr<const meshserve::ModelFile>(
        std::make_shared<meshserve::ModelFile>(*std::move(parsed)));
  }();
  return *model;
}

}  // namespace

// Malformed strings (invalid UTF-8) are logged by protobuf on every parse: quiet.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<meshserve::InferRequest> request = meshserve::InferRequestFromProto(&proto);
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  absl::StatusOr<meshserve::ValidatedRequest> valid =
      meshserve::ValidateInferRequest(Model(), *request);
  if (!valid.ok()) {
    if (valid.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  for (const meshserve::NamedTensor& in : request->inputs) {
    const meshserve::InputDef* def = Model()->FindInput(in.name);
    if (def == nullptr || in.shape.size() != def->shape.size()) __builtin_trap();
    int64_t n = meshserve::DTypeSize(in.dtype);
    for (int64_t d : in.shape) n *= d;
    if (static_cast<int64_t>(in.bytes.size()) != n) __builtin_trap();
  }
  return 0;
}
