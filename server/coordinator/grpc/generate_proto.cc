// GenerateRequestFromProto and SequenceEventToProto (generate_proto.h).
#include "server/coordinator/grpc/generate_proto.h"

#include <cmath>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tokenizer/stop_strings.h"

namespace meshserve {
namespace {

constexpr int64_t kDefaultMaxTokens = 16;

// Each id >= 0 (the vocabulary's upper bound is the generator's check).
template <typename Ids>
absl::Status CheckIds(const char* field, const Ids& ids) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids.Get(i) < 0) return InvalidArgument(field, "[", i, "] is ", ids.Get(i), ", below 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<SamplingParams> SamplingFromProto(const meshserve::GenerateRequest& proto) {
  SamplingParams s;
  if (proto.has_temperature()) {
    MS_RETURN_IF_ERROR(CheckTemperature(proto.temperature()));
    s.temperature = proto.temperature();
  }
  if (proto.has_top_p()) {
    MS_RETURN_IF_ERROR(CheckTopP(proto.top_p()));
    s.top_p = proto.top_p();
  }
  MS_RETURN_IF_ERROR(CheckTopK(proto.top_k()));
  s.top_k = proto.top_k() == -1 ? 0 : proto.top_k();
  if (proto.has_logprobs()) {
    MS_RETURN_IF_ERROR(CheckLogprobs(proto.logprobs()));
    s.num_logprobs = proto.logprobs();
  }
  if (proto.has_seed()) s.seed = proto.seed();
  return s;
}

}  // namespace

absl::StatusOr<GenerateCall> GenerateRequestFromProto(const meshserve::GenerateRequest& proto) {
  GenerateCall call;
  if (proto.model().empty()) return InvalidArgument("model is empty: name the model");
  call.model = proto.model();
  const bool has_text = !proto.prompt().empty();
  const bool has_ids = proto.prompt_ids_size() > 0;
  if (has_text == has_ids) {
    return InvalidArgument(has_text ? "prompt and prompt_ids are both given"
                                    : "prompt and prompt_ids are both empty",
                           ": give exactly one of them");
  }
  MS_RETURN_IF_ERROR(CheckIds("prompt_ids", proto.prompt_ids()));
  MS_RETURN_IF_ERROR(CheckIds("stop_token_ids", proto.stop_token_ids()));
  if (proto.max_tokens() < 0) {
    return InvalidArgument("max_tokens ", proto.max_tokens(), " must be >= 1 (0: ",
                           kDefaultMaxTokens, ")");
  }
  MS_ASSIGN_OR_RETURN(call.sampling, SamplingFromProto(proto));
  call.has_seed = proto.has_seed();
  if (has_text) call.prompt_text = proto.prompt();
  call.prompt_ids.assign(proto.prompt_ids().begin(), proto.prompt_ids().end());
  call.stop.max_tokens = proto.max_tokens() == 0 ? kDefaultMaxTokens : proto.max_tokens();
  call.stop.stop_token_ids.assign(proto.stop_token_ids().begin(), proto.stop_token_ids().end());
  call.stop.ignore_eos = proto.ignore_eos();
  call.stop_strings.assign(proto.stop().begin(), proto.stop().end());
  MS_RETURN_IF_ERROR(tokenizer::ValidateStopStrings(call.stop_strings, "stop"));
  return call;
}

void SequenceEventToProto(const SequenceEvent& event, GenerateChunk* chunk) {
  chunk->mutable_token_ids()->Add(event.token_ids.begin(), event.token_ids.end());
  chunk->mutable_logprobs()->Add(event.logprobs.begin(), event.logprobs.end());
  for (const std::vector<TopLogprob>& position : event.top_logprobs) {
    TopLogprobs* top = chunk->add_top_logprobs();
    for (const TopLogprob& t : position) {
      top->add_token_ids(t.token_id);
      top->add_logprobs(t.logprob);
    }
  }
  chunk->set_version(event.version);
  if (event.finish != FinishReason::kStop && event.finish != FinishReason::kLength) return;
  chunk->set_finish_reason(FinishReasonName(event.finish));
  GenerateUsage* usage = chunk->mutable_usage();
  usage->set_prompt_tokens(event.prompt_tokens);
  usage->set_completion_tokens(event.completion_tokens);
  usage->set_total_tokens(event.prompt_tokens + event.completion_tokens);
}

}  // namespace meshserve
