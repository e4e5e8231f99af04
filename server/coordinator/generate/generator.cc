// Generator (generator.h).
#include "server/coordinator/generate/generator.h"

#include <cstdint>
#include <random>
#include <utility>

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

}  // namespace

std::string TokenTextDecoder::Next(const std::vector<int64_t>& ids, bool last) {
  if (tokenizer_ == nullptr) return "";
  std::string text;
  for (int64_t id : ids) {
    if (id < 0 || id > INT32_MAX) continue;
    absl::StatusOr<std::string> bytes = tokenizer_->Decode({static_cast<int32_t>(id)});
    if (bytes.ok()) text += utf8_.Push(*bytes);
  }
  if (last) text += utf8_.Finish();
  return text;
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
  MS_ASSIGN_OR_RETURN(GenerationModel model, backend_->Model(request.model));
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
  MS_RETURN_IF_ERROR(LoopFor(request.model, model).status());
  GenerationHandle handle;
  handle.model = request.model;
  handle.version = model.version;
  handle.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
  handle.prompt_ids = request.prompt_ids;
  handle.tokenizer = model.tokenizer;
  SequenceSink sink = make_sink(handle);
  if (metrics_ != nullptr) {
    auto gauges = [this, name = handle.model, bytes = model.block_bytes] {
      const auto stats = Stats();
      auto it = stats.find(name);
      if (it != stats.end()) metrics_->SetModelState(name, it->second, bytes);
    };
    sink = metrics_->Observe(handle.model, std::move(sink), std::move(gauges));
  }
  if (model.hold != nullptr) {
    // The sink lives as long as the sequence: so does what pins its version.
    sink = [hold = model.hold, sink = std::move(sink)](const SequenceEvent& e) {
      if (sink) sink(e);
    };
  }
  SequenceRequest seq;
  seq.prompt_ids = std::move(request.prompt_ids);
  seq.sampling = request.sampling;
  seq.stop = std::move(request.stop);
  // Under the lock: Shutdown may not destroy the loop meanwhile (Add calls
  // back into nothing here).
  absl::MutexLock lock(&mu_);
  auto it = loops_.find(request.model);
  if (shut_down_ || it == loops_.end()) return Unavailable("the coordinator is stopping");
  MS_ASSIGN_OR_RETURN(handle.seq,
                      it->second.loop->Add(std::move(seq), model.version, std::move(sink)),
                      "model '", request.model, "'");
  return handle;
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
