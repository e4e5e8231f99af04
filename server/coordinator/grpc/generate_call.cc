// StartGeneration (generate_call.h): GenerateCall -> the core GenerationRequest.
// Includes generator.h and no .pb.h (see the header for why).
#include "server/coordinator/grpc/generate_call.h"

#include <memory>
#include <utility>

#include "common/base/status_macros.h"
#include "server/coordinator/generate/generator.h"

namespace meshserve {

absl::StatusOr<std::function<void()>> StartGeneration(Generator& generator, GenerateCall call,
                                                      TextSink sink) {
  GenerationRequest request;
  request.model = std::move(call.model);
  request.prompt_text = std::move(call.prompt_text);
  request.prompt_ids = std::move(call.prompt_ids);
  request.sampling = call.sampling;
  request.has_seed = call.has_seed;
  request.stop = std::move(call.stop);
  request.stop_strings = std::move(call.stop_strings);
  // The sink is made before the sequence joins: its first events may come
  // before StartWith returns, and they need the handle's tokenizer.
  auto make_sink = [&sink](const GenerationHandle& handle) -> SequenceSink {
    auto text = std::make_shared<TokenTextDecoder>(handle.tokenizer, handle.stop_strings);
    return [text, sink = std::move(sink)](const SequenceEvent& e) {
      sink(e, text->Next(e.token_ids, e.finish != FinishReason::kNone));
    };
  };
  MS_ASSIGN_OR_RETURN(GenerationHandle handle,
                      generator.StartWith(std::move(request), make_sink));
  Generator* g = &generator;
  return std::function<void()>([g, handle] { g->Cancel(handle); });
}

}  // namespace meshserve
