// StartGeneration (generate_call.h): GenerateCall -> the core GenerateRequest.
// Includes generator.h and no .pb.h (see the header for why).
#include "server/coordinator/grpc/generate_call.h"

#include <utility>

#include "common/base/status_macros.h"
#include "server/coordinator/generate/generator.h"

namespace meshserve {

absl::StatusOr<std::function<void()>> StartGeneration(Generator& generator, GenerateCall call,
                                                      SequenceSink sink) {
  GenerateRequest request;
  request.model = std::move(call.model);
  request.prompt_text = std::move(call.prompt_text);
  request.prompt_ids = std::move(call.prompt_ids);
  request.sampling = call.sampling;
  request.has_seed = call.has_seed;
  request.stop = std::move(call.stop);
  MS_ASSIGN_OR_RETURN(GenerationHandle handle,
                      generator.Start(std::move(request), std::move(sink)));
  Generator* g = &generator;
  return std::function<void()>([g, handle] { g->Cancel(handle); });
}

}  // namespace meshserve
