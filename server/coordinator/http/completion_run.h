// One POST /v1/completions request in flight: the n sequences' events,
// gathered from the generation loop's thread (the sinks) for the HTTP thread
// that answers, and their conversion into OpenAI's choices.
//
//   loop thread:  sink(choice i) -> CompletionRun::Push   (never blocks)
//   HTTP thread:  CompletionRun::Take -> ChoiceTracker::Apply -> a chunk (stream)
//                 or appended to the whole choice (AppendChoiceDelta)
//
// A SequenceEvent becomes one choice delta: its new token_ids, their text,
// logprobs when asked, and on the last event finish_reason "stop" / "length".
// Text: the detokenizer gives the ids' bytes (Tokenizer::Decode's); a
// Utf8StreamDecoder per choice turns them into text as Python's
// bytes.decode("utf-8", errors="replace") does, holding back a character
// whose bytes have not all come (so a chunk never splits a character) and
// flushing it, as U+FFFD if still incomplete, on the choice's last event.
// Without a detokenizer the text is "". With stop strings, a
// StopStringMatcher per choice (common/tokenizer/stop_strings.h) cuts the
// text before the first stop and holds back text that may still start one
// until a later event settles it or the last event releases it (the
// Generator ends the sequence at the token that completed the stop, so its
// last event carries that token). Logprobs, OpenAI's lists: `tokens`
// each token's own bytes decoded (each id's decimal string without a
// detokenizer), `token_logprobs` the event's, `top_logprobs` per token a
// dict of the event's N most likely tokens (their texts, as `tokens`) and the
// sampled token when it is not among them (OpenAI's legacy completions: up
// to N + 1 entries; `logprobs` 0: the sampled token alone), `text_offset` the
// byte offset of each token's bytes in the choice's bytes (0s without a
// detokenizer). A last event that is neither (kError, or
// kCancelled by the server) is the choice's error (ChoiceTracker::error).
//
// Thread-safety: CompletionRun is thread-safe; ChoiceTracker and the free
// functions are used by one thread (the answering one).
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_COMPLETION_RUN_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_COMPLETION_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tokenizer/stop_strings.h"
#include "common/tokenizer/utf8.h"
#include "server/coordinator/generate/scheduler.h"
#include "server/coordinator/http/openai_response.h"

namespace meshserve {

// The bytes of `ids`' tokens in `model`'s vocabulary, concatenated
// (Tokenizer::Decode of common/tokenizer; not yet UTF-8-decoded: a token may
// hold part of a character). Null while no tokenizer is wired: completions
// then have "text": "".
using Detokenizer =
    std::function<std::string(const std::string& model, const std::vector<int64_t>& ids)>;

class CompletionRun : public std::enable_shared_from_this<CompletionRun> {
 public:
  struct Event {
    int32_t choice = 0;
    SequenceEvent event;
  };

  // The sink of sequence `choice`; it keeps the run alive while the
  // generation loop holds it.
  SequenceSink SinkFor(int32_t choice);
  // The events that arrived since the last Take, in arrival order; waits up
  // to `timeout` for the first one (empty when none came).
  std::vector<Event> Take(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Push(int32_t choice, const SequenceEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::vector<Event> pending_ ABSL_GUARDED_BY(mu_);
};

// The choices' state on the answering thread.
class ChoiceTracker {
 public:
  // `num_logprobs` is the request's logprobs (-1: none asked).
  // `stop_strings`: the request's "stop" (valid: ValidateStopStrings).
  ChoiceTracker(std::string model, int32_t num_choices, int32_t num_logprobs,
                Detokenizer detokenize, const std::vector<std::string>& stop_strings = {});

  // Applies `e` to its choice and returns the choice's delta.
  CompletionChoice Apply(const CompletionRun::Event& e);
  bool all_finished() const { return num_finished_ == static_cast<int32_t>(choices_.size()); }
  // The first choice that ended without a result (kError, kCancelled), else OK.
  const absl::Status& error() const { return error_; }
  // Over all choices (the prompt counted once, as OpenAI's usage does).
  CompletionUsage usage() const;

 private:
  struct Choice {
    explicit Choice(const std::vector<std::string>& stops) : stops(stops) {}
    tokenizer::Utf8StreamDecoder utf8;
    tokenizer::StopStringMatcher stops;
    int64_t num_bytes = 0;  // token bytes so far (text_offset)
    int64_t completion_tokens = 0;
    bool finished = false;
  };

  // The logprobs of `ev`'s tokens, the first at byte `offset` of the choice:
  // each position's top_logprobs dict holds the event's top N and the
  // sampled token when it is not among them (OpenAI's up to N + 1).
  CompletionLogprobs Logprobs(const SequenceEvent& ev, int64_t offset) const;
  // An id's text (its bytes decoded lossily), or its decimal string without
  // a tokenizer.
  std::string TokenText(int64_t id) const;

  const std::string model_;
  const int32_t num_logprobs_;
  const Detokenizer detokenize_;
  std::vector<Choice> choices_;
  int32_t num_finished_ = 0;
  int64_t prompt_tokens_ = 0;
  absl::Status error_;
};

// Appends a delta (Apply's) to a whole choice: text, ids, logprobs, finish.
void AppendChoiceDelta(const CompletionChoice& delta, CompletionChoice* whole);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_COMPLETION_RUN_H_
