// Generator (generator.h).
#include "server/coordinator/generate/generator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

// splitmix64: the seeds of requests that give none.
uint64_t NextSeed(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The prompt's ids: the request's, or its text encoded by the model's tokenizer.
absl::StatusOr<std::vector<int64_t>> PromptIds(GenerationRequest& request,
                                               const GenerationModel& model) {
  if (!request.prompt_text.has_value()) return std::move(request.prompt_ids);
  if (model.tokenizer == nullptr) {
    if (!model.tokenizer_error.ok()) {
      return InvalidArgument("model '", request.model,
                             "' cannot take a text prompt: its tokenizer did not load: ",
                             model.tokenizer_error.message());
    }
    return InvalidArgument("model '", request.model,
                           "' has no tokenizer here: send the prompt as token ids");
  }
  MS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, model.tokenizer->Encode(*request.prompt_text),
                      "the prompt of model '", request.model, "'");
  if (ids.empty()) {
    return InvalidArgument("the prompt text \"", *request.prompt_text,
                           "\" encodes to no tokens for model '", request.model, "'");
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// Stop strings need the text: a tokenizer, and stops that are non-empty UTF-8.
absl::Status CheckStopStrings(const GenerationRequest& request, const GenerationModel& model) {
  if (request.stop_strings.empty()) return absl::OkStatus();
  MS_RETURN_IF_ERROR(tokenizer::ValidateStopStrings(request.stop_strings, "stop"));
  if (model.tokenizer != nullptr) return absl::OkStatus();
  return InvalidArgument("stop strings [\"", absl::StrJoin(request.stop_strings, "\", \""),
                         "\"] need the text of model '", request.model, "', which has no ",
                         model.tokenizer_error.ok() ? "tokenizer here"
                                                    : "tokenizer (it did not load)",
                         ": send stop_token_ids");
}

// Where a sequence with stop strings stands between its events (its sink is
// called from one thread at a time).
struct StopStringSink {
  SequenceSink downstream;
  TokenTextDecoder text{nullptr};
  int64_t prompt_tokens = 0;
  int64_t version = 0;
  std::function<void()> cancel;  // ends the sequence (the loop's Cancel)
  int64_t completion_tokens = 0;
  bool done = false;  // the stop's event went: the rest is dropped

  void operator()(const SequenceEvent& e) {
    if (done) return;
    const bool last = e.finish != FinishReason::kNone;
    const TokenTextDecoder::Piece piece = text.Decode(e.token_ids, last);
    if (!piece.stopped) {
      completion_tokens += static_cast<int64_t>(e.token_ids.size());
      done = last;
      if (downstream) downstream(e);
      return;
    }
    SequenceEvent out;
    out.token_ids.assign(e.token_ids.begin(), e.token_ids.begin() + piece.num_ids);
    out.logprobs.assign(e.logprobs.begin(),
                        e.logprobs.begin() + std::min(e.logprobs.size(), piece.num_ids));
    out.top_logprobs.assign(
        e.top_logprobs.begin(),
        e.top_logprobs.begin() + std::min(e.top_logprobs.size(), piece.num_ids));
    completion_tokens += static_cast<int64_t>(piece.num_ids);
    out.finish = FinishReason::kStop;
    out.prompt_tokens = prompt_tokens;
    out.completion_tokens = completion_tokens;
    out.version = version;
    done = true;
    if (downstream) downstream(out);
    if (!last) cancel();
  }
};

}  // namespace

TokenTextDecoder::Piece TokenTextDecoder::Decode(const std::vector<int64_t>& ids, bool last) {
  Piece piece;
  if (stops_.stopped()) return piece;
  if (tokenizer_ == nullptr) {
    piece.num_ids = ids.size();
    return piece;
  }
  for (int64_t id : ids) {
    ++piece.num_ids;
    if (id < 0 || id > INT32_MAX) continue;
    absl::StatusOr<std::string> bytes = tokenizer_->Decode({static_cast<int32_t>(id)});
    if (!bytes.ok()) continue;
    piece.text += stops_.Push(utf8_.Push(*bytes));
    if (stops_.stopped()) {
      piece.stopped = true;
      return piece;
    }
  }
  if (last) {
    piece.text += stops_.Push(utf8_.Finish());
    piece.stopped = stops_.stopped();
    piece.text += stops_.Finish();
  }
  return piece;
}

Generator::Generator(GenerationBackend* backend, GeneratorOptions options)
    : backend_(backend),
      options_(options),
      metrics_(options.metrics != nullptr ? std::make_unique<GenerationMetrics>(options.metrics)
                                          : nullptr) {
  std::random_device device;
  seed_state_ = (static_cast<uint64_t>(device()) << 32) ^ device();
}

Generator::~Generator() { Shutdown(); }

void Generator::Shutdown() {
  // Loops stop (and end their sequences) before their executors go, outside
  // the lock: a sink may call Cancel.
  std::map<std::string, ModelLoop> loops;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    loops.swap(loops_);
  }
  for (auto& [name, model_loop] : loops) model_loop.loop.reset();
}

absl::StatusOr<GenerationLoop*> Generator::LoopFor(const std::string& name,
                                                   const GenerationModel& model) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return Unavailable("the coordinator is stopping");
    auto it = loops_.find(name);
    if (it != loops_.end()) return it->second.loop.get();
  }
  SchedulerOptions s;
  s.block_tokens = model.block_tokens;
  s.num_blocks = model.num_blocks;
  s.context_length = model.context_length;
  s.max_prefill_tokens_per_step = options_.max_prefill_tokens_per_step;
  s.max_running = options_.max_running;
  s.max_waiting = options_.max_waiting;
  s.eos_token_ids = model.eos_token_ids;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<GenerationScheduler> scheduler,
                      GenerationScheduler::Create(std::move(s)), "model '", name, "'");
  MS_ASSIGN_OR_RETURN(std::unique_ptr<StepExecutor> executor, backend_->NewExecutor(name));
  absl::MutexLock lock(&mu_);
  if (shut_down_) return Unavailable("the coordinator is stopping");
  ModelLoop& slot = loops_[name];
  if (slot.loop == nullptr) {  // else another request made it meanwhile
    slot.executor = std::move(executor);
    slot.loop = std::make_unique<GenerationLoop>(std::move(scheduler), slot.executor.get());
  }
  return slot.loop.get();
}

absl::StatusOr<GenerationHandle> Generator::Start(GenerationRequest request, SequenceSink sink) {
  return StartWith(std::move(request),
                   [&sink](const GenerationHandle&) { return std::move(sink); });
}

absl::StatusOr<GenerationHandle> Generator::StartWith(GenerationRequest request,
                                                      const SinkFactory& make_sink) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  MS_ASSIGN_OR_RETURN(std::vector<GenerationHandle> handles, StartGroup(std::move(one),
                                                                        {make_sink}));
  return std::move(handles[0]);
}

absl::StatusOr<Generator::Prepared> Generator::Prepare(GenerationRequest request,
                                                       const GenerationModel& model,
                                                       const SinkFactory& make_sink) {
  MS_RETURN_IF_ERROR(CheckStopStrings(request, model));
  MS_ASSIGN_OR_RETURN(request.prompt_ids, PromptIds(request, model));
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    const int64_t id = request.prompt_ids[i];
    if (id < 0 || id >= model.vocab_size) {
      return InvalidArgument("prompt token ", i, " is ", id, ", outside the vocabulary [0, ",
                             model.vocab_size, ") of model '", request.model, "'");
    }
  }
  if (!request.has_seed) {
    absl::MutexLock lock(&mu_);
    request.sampling.seed = NextSeed(seed_state_);
  }
  Prepared p;
  GenerationHandle& handle = p.handle;
  handle.model = request.model;
  handle.version = model.version;
  handle.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
  handle.prompt_ids = request.prompt_ids;
  handle.tokenizer = model.tokenizer;
  handle.stop_strings = request.stop_strings;
  SequenceSink sink = make_sink(handle);
  if (metrics_ != nullptr) {
    auto gauges = [this, name = handle.model, bytes = model.block_bytes] {
      const auto stats = Stats();
      auto it = stats.find(name);
      if (it != stats.end()) metrics_->SetModelState(name, it->second, bytes);
    };
    sink = metrics_->Observe(handle.model, std::move(sink), std::move(gauges));
  }
  // A stop string ends the sequence; the stop's sink may see it before Add
  // returns, so the id it cancels comes through `stop`.
  if (!handle.stop_strings.empty()) {
    p.stop = std::make_shared<PendingStop>();
    sink = StopAtStrings(std::move(sink), handle, p.stop);
  }
  if (model.hold != nullptr) {
    // The sink lives as long as the sequence: so does what pins its version.
    sink = [hold = model.hold, sink = std::move(sink)](const SequenceEvent& e) {
      if (sink) sink(e);
    };
  }
  p.sink = std::move(sink);
  p.seq.prompt_ids = std::move(request.prompt_ids);
  p.seq.sampling = request.sampling;
  p.seq.stop = std::move(request.stop);
  return p;
}

absl::StatusOr<std::vector<GenerationHandle>> Generator::StartGroup(
    std::vector<GenerationRequest> requests, const std::vector<SinkFactory>& make_sinks) {
  if (requests.empty() || make_sinks.size() != requests.size()) {
    return InvalidArgument("StartGroup: ", requests.size(), " requests and ", make_sinks.size(),
                           " sinks");
  }
  const std::string name = requests[0].model;
  for (const GenerationRequest& r : requests) {
    if (r.model != name) return InvalidArgument("StartGroup: models '", name, "' and '",
                                                r.model, "' in one group");
  }
  MS_ASSIGN_OR_RETURN(GenerationModel model, backend_->Model(name));
  std::vector<Prepared> prepared;
  for (size_t i = 0; i < requests.size(); ++i) {
    MS_ASSIGN_OR_RETURN(Prepared p, Prepare(std::move(requests[i]), model, make_sinks[i]));
    prepared.push_back(std::move(p));
  }
  MS_RETURN_IF_ERROR(LoopFor(name, model).status());
  std::vector<SequenceRequest> seqs;
  std::vector<SequenceSink> sinks;
  for (Prepared& p : prepared) {
    seqs.push_back(std::move(p.seq));
    sinks.push_back(std::move(p.sink));
  }
  // Under the lock: Shutdown may not destroy the loop meanwhile (Add calls
  // back into nothing here).
  absl::MutexLock lock(&mu_);
  auto it = loops_.find(name);
  if (shut_down_ || it == loops_.end()) return Unavailable("the coordinator is stopping");
  MS_ASSIGN_OR_RETURN(std::vector<SequenceId> ids,
                      it->second.loop->AddGroup(std::move(seqs), model.version, std::move(sinks)),
                      "model '", name, "'");
  std::vector<GenerationHandle> handles;
  for (size_t i = 0; i < prepared.size(); ++i) {
    prepared[i].handle.seq = ids[i];
    if (prepared[i].stop != nullptr) {
      absl::MutexLock stop_lock(&prepared[i].stop->mu);
      prepared[i].stop->seq = ids[i];
      if (prepared[i].stop->cancel_wanted) it->second.loop->Cancel(ids[i]);
    }
    handles.push_back(std::move(prepared[i].handle));
  }
  return handles;
}

SequenceSink Generator::StopAtStrings(SequenceSink sink, const GenerationHandle& handle,
                                      std::shared_ptr<PendingStop> stop) {
  auto state = std::make_shared<StopStringSink>();
  state->downstream = std::move(sink);
  state->text = TokenTextDecoder(handle.tokenizer, handle.stop_strings);
  state->prompt_tokens = handle.prompt_tokens;
  state->version = handle.version;
  // From the loop's thread: Cancel finds no loop once Shutdown took them.
  state->cancel = [this, model = handle.model, stop] {
    GenerationHandle h;
    h.model = model;
    {
      absl::MutexLock lock(&stop->mu);
      if (!stop->seq.has_value()) {
        stop->cancel_wanted = true;  // StartWith cancels once Add returns
        return;
      }
      h.seq = *stop->seq;
    }
    Cancel(h);
  };
  return [state](const SequenceEvent& e) { (*state)(e); };
}

void Generator::Cancel(const GenerationHandle& handle) {
  absl::MutexLock lock(&mu_);
  auto it = loops_.find(handle.model);
  if (it != loops_.end()) it->second.loop->Cancel(handle.seq);
}

std::map<std::string, GenerationScheduler::Stats> Generator::Stats() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, GenerationScheduler::Stats> stats;
  for (const auto& [name, model_loop] : loops_) stats[name] = model_loop.loop->Stats();
  return stats;
}

std::set<int64_t> Generator::LiveVersions(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = loops_.find(model);
  if (it == loops_.end()) return {};
  return it->second.loop->LiveVersions();
}

}  // namespace meshserve
