// meshserve.GenerateRequest (proto/generate.proto) -> GenerateCall (the
// generator's request, generate_call.h says why it is not GenerateRequest
// itself), and one
// SequenceEvent -> one GenerateChunk: the gRPC Generate edge's conversions,
// kept apart from the service so they can be fuzzed and tested alone.
//
// Defaults and ranges (OpenAI's and vLLM's names and meanings):
//   max_tokens   0 -> 16; < 0 refused
//   temperature  unset -> 1; < 0 or not finite refused (0: greedy)
//   top_p        unset -> 1; outside (0, 1] refused
//   top_k        -1 -> 0 (off); < -1 refused
//   seed         unset -> has_seed false (the generator draws one)
//   logprobs     unset -> none (-1); outside [0, 20] refused
//   prompt / prompt_ids  exactly one of them; ids (prompt and stop) >= 0
//   stop         each non-empty and valid UTF-8 ("stop[1] is empty")
// The sampling fields' checks and messages are common/sampling's
// (CheckTemperature, CheckTopP, CheckTopK, CheckLogprobs), the same as the
// OpenAI decoder's. Ids are checked against the model's vocabulary later, by
// Generator::Start.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_PROTO_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_PROTO_H_

#include "absl/status/statusor.h"
#include "proto/generate.pb.h"
#include "server/coordinator/grpc/generate_call.h"

namespace meshserve {

// \error kInvalidArgument naming the field and its value (see above), or an
//   empty model name.
absl::StatusOr<GenerateCall> GenerateRequestFromProto(const meshserve::GenerateRequest& proto);

// One event as a chunk: its ids, logprobs, top logprobs and version; a last event (kStop /
// kLength) also gets finish_reason and usage. kCancelled / kError events are
// not chunks (the service ends the call instead); they encode their ids only.
void SequenceEventToProto(const SequenceEvent& event, GenerateChunk* chunk);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_PROTO_H_
