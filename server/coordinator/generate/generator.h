// The coordinator's generation service core: one GenerationLoop per model
// that generates, created on the model's first sequence, and the checks a
// request passes before it joins (the edges -- gRPC Generate, OpenAI HTTP,
// the CLI -- decode into GenerationRequest and call Start).
//
// What the generator needs of the coordinator is the GenerationBackend: a
// model's limits (vocabulary, context, eos ids, KV blocks), its current
// weight version, and a StepExecutor that runs steps on the model's workers.
// A sequence is pinned to the version current at Start.
//
// Stop strings (GenerationRequest::stop_strings, OpenAI's `stop`): the
// generator decodes each sequence's tokens (TokenTextDecoder) as they come;
// when the text holds a stop string, the sequence ends with kStop at the
// token that completed it: its sink gets the tokens up to and including that
// one (vLLM's token_ids), completion_tokens counts them, and the sequence is
// cancelled (tokens sampled meanwhile and its kCancelled event are dropped).
// The edges' text comes from their own TokenTextDecoder with the same stops
// (GenerationHandle::stop_strings): the same tokens give the same text, cut
// before the stop, with a possible stop's start held back until settled.
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATOR_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tokenizer/stop_strings.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "server/coordinator/generate/generation_loop.h"
#include "server/coordinator/generate/generation_metrics.h"

namespace meshserve {

// One generation request, as every edge decodes it.
struct GenerationRequest {
  std::string model;
  std::optional<std::string> prompt_text;  // needs the model's tokenizer
  std::vector<int64_t> prompt_ids;
  SamplingParams sampling;
  bool has_seed = false;  // else the generator draws one
  StopParams stop;
  // Non-empty, valid UTF-8; need the model's tokenizer.
  std::vector<std::string> stop_strings;
};

// What a model offers generation.
struct GenerationModel {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t block_tokens = 16;
  int64_t num_blocks = 0;  // the smallest KV pool of the model's workers
  int64_t block_bytes = 0;  // a block's bytes on the fullest device (metrics)
  int64_t version = 0;     // the weight version a sequence starting now runs on
  // Held by each sequence started now until it ends (the coordinator's
  // placement of `version`: a retired version is unloaded only when no one
  // holds it, so a push never pulls the weights from under a sequence).
  std::shared_ptr<const void> hold;
  // The model's tokenizer (null without one); when its folder failed to load,
  // null and `tokenizer_error` holds the loader's error.
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  absl::Status tokenizer_error;
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // \error kNotFound for an unknown model; kFailedPrecondition for one that
  //   cannot generate (no cached attention) or is not placed yet.
  virtual absl::StatusOr<GenerationModel> Model(const std::string& name) = 0;
  // The executor of the model's steps (lives as long as the model's loop).
  virtual absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string& name) = 0;
};

struct GeneratorOptions {
  int64_t max_prefill_tokens_per_step = 512;
  int64_t max_running = 64;
  int64_t max_waiting = 256;
  // Where the generation metrics go (generation_metrics.h); null: nowhere.
  MetricRegistry* metrics = nullptr;
};

// A started sequence (for Cancel).
struct GenerationHandle {
  std::string model;
  SequenceId seq = 0;
  int64_t version = 0;
  int64_t prompt_tokens = 0;
  std::vector<int64_t> prompt_ids;  // as it runs (a text prompt's encoding)
  // The model's tokenizer (null without one): the edges turn the sink's ids
  // into text with it (TokenTextDecoder, one per sequence).
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::vector<std::string> stop_strings;  // the request's
};

// A sequence's ids -> text for the edges: each id's bytes (Tokenizer::Decode;
// an id the tokenizer does not know gives none) through a Utf8StreamDecoder,
// so a chunk never splits a character and invalid bytes become U+FFFD as
// Python's errors="replace", then through a StopStringMatcher
// (common/tokenizer/stop_strings.h): the text ends before the first stop
// string, and text that may still start one is held back until settled.
// Without a tokenizer the text is "". One per sequence, used by one thread at
// a time.
class TokenTextDecoder {
 public:
  explicit TokenTextDecoder(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                            std::vector<std::string> stop_strings = {})
      : tokenizer_(std::move(tokenizer)), stops_(std::move(stop_strings)) {}

  struct Piece {
    std::string text;     // settled text (never taken back)
    size_t num_ids = 0;   // ids consumed: all of them, or up to the stop's
    bool stopped = false; // a stop string completed at id num_ids - 1
  };
  // Decodes `ids` one by one until a stop string completes; `last` flushes
  // the held-back text (a partial character as U+FFFD, a possible stop's
  // start). After a stop every call gives an empty Piece.
  Piece Decode(const std::vector<int64_t>& ids, bool last);
  // Decode(ids, last).text.
  std::string Next(const std::vector<int64_t>& ids, bool last) { return Decode(ids, last).text; }
  bool stopped() const { return stops_.stopped(); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  tokenizer::Utf8StreamDecoder utf8_;
  tokenizer::StopStringMatcher stops_;
};

class Generator {
 public:
  // `backend` must outlive the generator.
  Generator(GenerationBackend* backend, GeneratorOptions options);
  ~Generator();

  // Checks `request` against its model and starts it; `sink` then gets the
  // tokens (GenerationLoop). A text prompt is encoded with the model's
  // tokenizer (BOS as the tokenizer says). \error the backend's;
  //   kInvalidArgument naming the value: text for a model without a tokenizer
  //   (or whose tokenizer failed to load: the loader's message), text that
  //   encodes to no tokens or is not UTF-8, an id outside [0, vocab_size),
  //   stop strings for a model without a tokenizer or an empty / non-UTF-8
  //   one ("stop[1] is empty"), the
  //   scheduler's refusals (empty prompt, context, cache); kResourceExhausted
  //   when the model's queue is full.
  absl::StatusOr<GenerationHandle> Start(GenerationRequest request, SequenceSink sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same with the sink made from the handle (its tokenizer, version,
  // prompt_tokens) before the sequence joins: events may come before Start
  // returns.
  using SinkFactory = std::function<SequenceSink(const GenerationHandle&)>;
  absl::StatusOr<GenerationHandle> StartWith(GenerationRequest request,
                                             const SinkFactory& make_sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // n sequences of one model started together, handles in order: when all
  // have one prompt and the model's executor can fork, they share its prefill
  // (GenerationScheduler::AddGroup: tokens as n separate Starts'), else they
  // are started one by one. All or nothing: a refusal of any starts none.
  // \error StartWith's; kInvalidArgument for an empty group, a sink count
  //   other than the requests', or several models.
  absl::StatusOr<std::vector<GenerationHandle>> StartGroup(
      std::vector<GenerationRequest> requests, const std::vector<SinkFactory>& make_sinks)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(const GenerationHandle& handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every sequence (kCancelled) and stops the loops; Start then answers
  // kUnavailable. Called before the coordinator goes (the loops call it).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Per model with a loop: its scheduler's stats.
  std::map<std::string, GenerationScheduler::Stats> Stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Versions held by running or waiting sequences of `model`.
  std::set<int64_t> LiveVersions(const std::string& model) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct ModelLoop {
    std::unique_ptr<StepExecutor> executor;
    std::unique_ptr<GenerationLoop> loop;
  };
  absl::StatusOr<GenerationLoop*> LoopFor(const std::string& name, const GenerationModel& model)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A sequence with stop strings whose stop came before its id was known.
  struct PendingStop {
    absl::Mutex mu;
    std::optional<SequenceId> seq ABSL_GUARDED_BY(mu);
    bool cancel_wanted ABSL_GUARDED_BY(mu) = false;
  };
  // A checked request, its handle (seq unset) and its wrapped sink.
  struct Prepared {
    GenerationHandle handle;
    SequenceRequest seq;
    SequenceSink sink;
    std::shared_ptr<PendingStop> stop;  // with stop strings
  };
  absl::StatusOr<Prepared> Prepare(GenerationRequest request, const GenerationModel& model,
                                   const SinkFactory& make_sink) ABSL_LOCKS_EXCLUDED(mu_);
  // `sink` behind the stop strings of `handle` (the file comment): the stop's
  // event ends with kStop and the sequence is cancelled.
  SequenceSink StopAtStrings(SequenceSink sink, const GenerationHandle& handle,
                             std::shared_ptr<PendingStop> stop);

  GenerationBackend* const backend_;
  const GeneratorOptions options_;
  std::unique_ptr<GenerationMetrics> metrics_;  // null without options.metrics
  mutable absl::Mutex mu_;
  std::map<std::string, ModelLoop> loops_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t seed_state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATOR_H_
