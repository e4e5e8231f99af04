// A decoded Generate call and the one function that starts it on the
// Generator: the seam between the gRPC Generate edge and the generation core.
//
// Why a seam: the core's request struct (GenerationRequest, generate/
// generator.h) once had the C++ name of proto/generate.proto's message
// meshserve.GenerateRequest (an ODR violation UBSan caught); the edge keeps
// its files apart from the core's anyway: GenerateCall carries the core
// request's fields; generate_call.cc (generator.h, never a .pb.h) turns it
// into the core request, and the edge's files include this header and the
// .pb.h.
//
// Thread-safety: StartGeneration is thread-safe (the Generator is); the
// canceller it returns may be called from any thread, more than once.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_CALL_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_CALL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/sampling_params.h"
#include "server/coordinator/generate/scheduler.h"

namespace meshserve {

class Generator;

// The core GenerationRequest's fields (generator.h), as the edge decodes them.
struct GenerateCall {
  std::string model;
  std::optional<std::string> prompt_text;
  std::vector<int64_t> prompt_ids;
  SamplingParams sampling;
  bool has_seed = false;
  StopParams stop;
  std::vector<std::string> stop_strings;
};

// A sequence's events with their text: the event's ids decoded by the
// model's tokenizer (TokenTextDecoder; "" without a tokenizer), a held-back
// partial character flushed on the last event; with stop strings, the text
// ends before the stop, and a possible stop's start is held back until a
// later event settles it.
using TextSink = std::function<void(const SequenceEvent& event, const std::string& text)>;

// Generator::Start(call, sink); returns the function that cancels the started
// sequence (Generator::Cancel on its handle). \error Generator::Start's.
absl::StatusOr<std::function<void()>> StartGeneration(Generator& generator, GenerateCall call,
                                                      TextSink sink);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_CALL_H_
