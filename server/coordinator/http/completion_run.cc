// CompletionRun and ChoiceTracker (completion_run.h).
#include "server/coordinator/http/completion_run.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace meshserve {

SequenceSink CompletionRun::SinkFor(int32_t choice) {
  return [run = shared_from_this(), choice](const SequenceEvent& e) { run->Push(choice, e); };
}

void CompletionRun::Push(int32_t choice, const SequenceEvent& event) {
  absl::MutexLock lock(&mu_);
  pending_.push_back(Event{choice, event});
}

std::vector<CompletionRun::Event> CompletionRun::Take(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_events = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pending_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&has_events), timeout);
  std::vector<Event> out;
  out.swap(pending_);
  return out;
}

ChoiceTracker::ChoiceTracker(std::string model, int32_t num_choices, int32_t num_logprobs,
                             Detokenizer detokenize, const std::vector<std::string>& stop_strings)
    : model_(std::move(model)),
      num_logprobs_(num_logprobs),
      detokenize_(std::move(detokenize)),
      choices_(static_cast<size_t>(num_choices), Choice(stop_strings)) {}

CompletionChoice ChoiceTracker::Apply(const CompletionRun::Event& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  const SequenceEvent& ev = e.event;
  CompletionChoice delta;
  delta.index = e.choice;
  delta.token_ids = ev.token_ids;
  if (num_logprobs_ >= 0) delta.logprobs = Logprobs(ev, c.num_bytes);
  if (detokenize_ != nullptr && !ev.token_ids.empty()) {
    const std::string bytes = detokenize_(model_, ev.token_ids);
    c.num_bytes += static_cast<int64_t>(bytes.size());
    delta.text = c.stops.Push(c.utf8.Push(bytes));
  }
  c.completion_tokens += static_cast<int64_t>(ev.token_ids.size());
  if (ev.finish != FinishReason::kNone && !c.finished) {
    c.finished = true;
    ++num_finished_;
    delta.text += c.stops.Push(c.utf8.Finish());
    delta.text += c.stops.Finish();
    prompt_tokens_ = std::max(prompt_tokens_, ev.prompt_tokens);
    if (ev.finish == FinishReason::kStop || ev.finish == FinishReason::kLength) {
      delta.finish_reason = FinishReasonName(ev.finish);
    } else if (error_.ok()) {
      error_ = ev.finish == FinishReason::kError && !ev.status.ok()
                   ? ev.status
                   : absl::UnavailableError(absl::StrCat(
                         "choice ", e.choice, " of the completion ended before its last token (",
                         FinishReasonName(ev.finish),
                         "): the server is stopping or the model was unloaded"));
    }
  }
  return delta;
}

CompletionLogprobs ChoiceTracker::Logprobs(const SequenceEvent& ev, int64_t offset) const {
  CompletionLogprobs lp;
  for (size_t i = 0; i < ev.token_ids.size(); ++i) {
    const int64_t id = ev.token_ids[i];
    lp.text_offset.push_back(offset);
    if (detokenize_ == nullptr) {
      lp.tokens.push_back(TokenText(id));
    } else {  // one detokenize gives the token's byte count and its text
      const std::string bytes = detokenize_(model_, {id});
      offset += static_cast<int64_t>(bytes.size());
      lp.tokens.push_back(tokenizer::DecodeUtf8Lossy(bytes));
    }
    // A sequence asked for logprobs gets one per token; a missing one (not
    // expected) is written as -inf's stand-in rather than shifting the rest.
    const float logprob =
        i < ev.logprobs.size() ? ev.logprobs[i] : -std::numeric_limits<float>::infinity();
    lp.token_logprobs.push_back(logprob);
    // OpenAI's: the N most likely, most likely first, then the sampled token
    // when it is not among them (up to N + 1 entries; logprobs 0: it alone).
    std::vector<std::pair<std::string, float>> top;
    bool sampled_listed = false;
    if (i < ev.top_logprobs.size()) {
      for (const TopLogprob& t : ev.top_logprobs[i]) {
        top.emplace_back(TokenText(t.token_id), t.logprob);
        sampled_listed = sampled_listed || t.token_id == id;
      }
    }
    if (!sampled_listed) top.emplace_back(lp.tokens.back(), logprob);
    lp.top_logprobs.push_back(std::move(top));
  }
  return lp;
}

std::string ChoiceTracker::TokenText(int64_t id) const {
  if (detokenize_ == nullptr) return absl::StrCat(id);
  return tokenizer::DecodeUtf8Lossy(detokenize_(model_, {id}));
}

CompletionUsage ChoiceTracker::usage() const {
  CompletionUsage u;
  u.prompt_tokens = prompt_tokens_;
  for (const Choice& c : choices_) u.completion_tokens += c.completion_tokens;
  return u;
}

void AppendChoiceDelta(const CompletionChoice& delta, CompletionChoice* whole) {
  whole->index = delta.index;
  whole->text += delta.text;
  whole->token_ids.insert(whole->token_ids.end(), delta.token_ids.begin(),
                          delta.token_ids.end());
  if (delta.logprobs.has_value()) {
    if (!whole->logprobs.has_value()) whole->logprobs.emplace();
    CompletionLogprobs& to = *whole->logprobs;
    const CompletionLogprobs& from = *delta.logprobs;
    to.tokens.insert(to.tokens.end(), from.tokens.begin(), from.tokens.end());
    to.token_logprobs.insert(to.token_logprobs.end(), from.token_logprobs.begin(),
                             from.token_logprobs.end());
    to.top_logprobs.insert(to.top_logprobs.end(), from.top_logprobs.begin(),
                           from.top_logprobs.end());
    to.text_offset.insert(to.text_offset.end(), from.text_offset.begin(),
                          from.text_offset.end());
  }
  if (!delta.finish_reason.empty()) whole->finish_reason = delta.finish_reason;
}

}  // namespace meshserve
