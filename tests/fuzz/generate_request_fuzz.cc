// libFuzzer target: the gRPC Generate request's decoding on the coordinator.
// The input is the request's wire bytes: parsed as meshserve.GenerateRequest
// (proto/generate.proto) and converted by GenerateRequestFromProto
// (server/coordinator/grpc/generate_proto.h), as GenerateServiceImpl does
// before Generator::Start.
// Invariants: never crashes; every refusal is kInvalidArgument; an accepted
// request has a model, exactly one of a text prompt and token ids, ids and
// stop ids >= 0, max_tokens >= 1 (16 for 0), a finite temperature >= 0, top_p
// in (0, 1], top_k >= 0 (-1 became 0), num_logprobs in [-1, 20], a seed
// exactly when the request had one, and the request's stop strings, each
// non-empty.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/generate.pb.h"
#include "server/coordinator/grpc/generate_proto.h"

namespace {

bool Accepted(const meshserve::GenerateRequest& proto, const meshserve::GenerateCall& call) {
  const meshserve::SamplingParams& s = call.sampling;
  if (call.model.empty() || call.model != proto.model()) return false;
  if (call.prompt_text.has_value() == !call.prompt_ids.empty()) return false;
  if (call.prompt_text.has_value() && call.prompt_text->empty()) return false;
  for (int64_t id : call.prompt_ids) {
    if (id < 0) return false;
  }
  for (int64_t id : call.stop.stop_token_ids) {
    if (id < 0) return false;
  }
  if (call.stop.max_tokens < 1) return false;
  if (proto.max_tokens() == 0 && call.stop.max_tokens != 16) return false;
  if (!std::isfinite(s.temperature) || s.temperature < 0) return false;
  if (!(s.top_p > 0 && s.top_p <= 1) || s.top_k < 0) return false;
  if (s.num_logprobs < -1 || s.num_logprobs > meshserve::kMaxLogprobs) return false;
  if (call.has_seed != proto.has_seed() || (call.has_seed && s.seed != proto.seed())) {
    return false;
  }
  if (static_cast<int>(call.stop_strings.size()) != proto.stop_size()) return false;
  for (size_t i = 0; i < call.stop_strings.size(); ++i) {
    if (call.stop_strings[i].empty() || call.stop_strings[i] != proto.stop(static_cast<int>(i))) {
      return false;
    }
  }
  return call.stop.ignore_eos == proto.ignore_eos();
}

}  // namespace

// Malformed strings (invalid UTF-8) are logged by protobuf on every parse: quiet.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshserve::GenerateRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<meshserve::GenerateCall> call = meshserve::GenerateRequestFromProto(proto);
  if (!call.ok()) {
    if (call.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  if (!Accepted(proto, *call)) __builtin_trap();
  return 0;
}
