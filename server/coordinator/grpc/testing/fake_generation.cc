// FakeGeneration (fake_generation.h). Includes generator.h, no .pb.h.
#include "server/coordinator/grpc/testing/fake_generation.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/generate/testing/char_tokenizer.h"
#include "server/coordinator/generate/testing/fake_steps.h"

namespace meshserve {
namespace testing {
namespace {

// Counters shared by the executor (loop thread) and the test thread.
struct Counters {
  mutable absl::Mutex mu;
  int64_t steps ABSL_GUARDED_BY(mu) = 0;
  int64_t cached ABSL_GUARDED_BY(mu) = 0;
  int64_t released ABSL_GUARDED_BY(mu) = 0;
  bool paused ABSL_GUARDED_BY(mu) = false;
  bool waiting ABSL_GUARDED_BY(mu) = false;
};

class CountingExecutor : public StepExecutor {
 public:
  CountingExecutor(Counters* counters, absl::Duration delay, bool fail)
      : counters_(counters), delay_(delay) {
    if (fail) fake_.fail_at_step = 0;  // set again before every step below
  }
  absl::StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan) override {
    {
      absl::MutexLock lock(&counters_->mu);
      counters_->waiting = true;
      counters_->mu.Await(absl::Condition(
          +[](Counters* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !c->paused; }, counters_));
      counters_->waiting = false;
    }
    if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
    if (fake_.fail_at_step >= 0) fake_.fail_at_step = fake_.steps + 1;  // this one fails
    absl::StatusOr<std::vector<SampledToken>> out = fake_.RunStep(plan);
    absl::MutexLock lock(&counters_->mu);
    ++counters_->steps;
    counters_->released += static_cast<int64_t>(plan.release.size());
    counters_->cached = static_cast<int64_t>(fake_.workers.kv.size());
    return out;
  }

 private:
  Counters* const counters_;
  const absl::Duration delay_;
  FakeExecutor fake_;
};


class Backend : public GenerationBackend {
 public:
  Backend(Counters* counters, FakeGenerationOptions options)
      : counters_(counters), options_(options) {}
  absl::StatusOr<GenerationModel> Model(const std::string& name) override {
    if (name != "lm") return absl::NotFoundError("no model '" + name + "'");
    GenerationModel m;
    m.vocab_size = kVocab;
    m.context_length = 4096;
    m.block_tokens = 16;
    m.num_blocks = 4096;
    m.version = options_.version;
    if (options_.with_tokenizer) m.tokenizer = tokenizer_;
    return m;
  }
  absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string&) override {
    return std::unique_ptr<StepExecutor>(
        std::make_unique<CountingExecutor>(counters_, options_.step_delay, options_.fail_steps));
  }

 private:
  Counters* const counters_;
  const FakeGenerationOptions options_;
  const std::shared_ptr<const tokenizer::Tokenizer> tokenizer_ =
      std::make_shared<CharTokenizer>(CharTokenizer::Alphabet(kFakeTokenChars));
};

}  // namespace

std::string FakeTokenText(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) {
    if (id >= 0 && id < kVocab) out += kFakeTokenChars[id];
  }
  return out;
}

struct FakeGeneration::Impl {
  explicit Impl(FakeGenerationOptions options)
      : backend(&counters, options), generator(&backend, GeneratorOptionsFor(options)) {}
  static GeneratorOptions GeneratorOptionsFor(const FakeGenerationOptions& options) {
    GeneratorOptions g;
    g.max_running = options.max_running;
    g.max_waiting = options.max_waiting;
    return g;
  }
  Counters counters;
  Backend backend;
  Generator generator;
};

FakeGeneration::FakeGeneration(FakeGenerationOptions options)
    : impl_(std::make_unique<Impl>(options)) {}
FakeGeneration::~FakeGeneration() { Resume(); }

Generator* FakeGeneration::generator() { return &impl_->generator; }

int64_t FakeGeneration::steps() const {
  absl::MutexLock lock(&impl_->counters.mu);
  return impl_->counters.steps;
}
int64_t FakeGeneration::cached_sequences() const {
  absl::MutexLock lock(&impl_->counters.mu);
  return impl_->counters.cached;
}
int64_t FakeGeneration::released() const {
  absl::MutexLock lock(&impl_->counters.mu);
  return impl_->counters.released;
}
int64_t FakeGeneration::waiting() const {
  int64_t n = 0;
  for (const auto& [name, stats] : impl_->generator.Stats()) n += stats.waiting;
  return n;
}
int64_t FakeGeneration::live() const {
  int64_t n = 0;
  for (const auto& [name, stats] : impl_->generator.Stats()) n += stats.waiting + stats.running;
  return n;
}
void FakeGeneration::Pause() {
  absl::MutexLock lock(&impl_->counters.mu);
  impl_->counters.paused = true;
}
void FakeGeneration::Resume() {
  absl::MutexLock lock(&impl_->counters.mu);
  impl_->counters.paused = false;
}
void FakeGeneration::WaitUntilStepWaits() {
  absl::MutexLock lock(&impl_->counters.mu);
  impl_->counters.mu.Await(absl::Condition(
      +[](Counters* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->paused && c->waiting; },
      &impl_->counters));
}

}  // namespace testing
}  // namespace meshserve
