// A GenerationBackend over the fake workers of
// server/coordinator/generate/testing/fake_steps.h, for the tests of the
// OpenAI routes: one model, "lm" (vocabulary testing::kVocab = 50, the
// context of Options), whose tokens are testing::Reference(prompt, ...).
// Its executor waits Options::step_delay per step (so a stream lasts long
// enough to be left mid-way), can be held (HoldSteps) and records the sequences it ran, in order, and
// the ones the workers were told to release, with the tokens each had cached
// then.
//
// Thread-safety: thread-safe (the executor runs on the generation loop's
// thread; the test reads under the backend's mutex).
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_FAKE_GENERATION_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_FAKE_GENERATION_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/generate/testing/fake_steps.h"

namespace meshserve {
namespace testing {

class FakeGenerationBackend : public GenerationBackend {
 public:
  struct Options {
    int64_t context_length = 64;
    int64_t version = 7;
    absl::Duration step_delay = absl::ZeroDuration();
    // > 0: the version goes up by one at this call of Model() (1-based), as
    // a push committing between two Starts.
    int64_t push_at_model_call = 0;
    // The model's tokenizer (GenerationModel::tokenizer); null: none.
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  };
  explicit FakeGenerationBackend(Options options)
      : options_(options), version_(options.version) {}

  absl::StatusOr<GenerationModel> Model(const std::string& name) override {
    if (name != "lm") return absl::NotFoundError("model '" + name + "' is not served");
    GenerationModel m;
    m.vocab_size = kVocab;
    m.context_length = options_.context_length;
    m.block_tokens = 16;
    m.num_blocks = (options_.context_length / 16 + 1) * 64;
    m.tokenizer = options_.tokenizer;
    absl::MutexLock lock(&mu_);
    if (++model_calls_ == options_.push_at_model_call) ++version_;
    m.version = version_;
    return m;
  }
  absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string&) override {
    return std::unique_ptr<StepExecutor>(new Executor(this));
  }

  // Waits up to `timeout` until `count` sequences have run; they, in the
  // order of their first step (fewer on a timeout).
  std::vector<SequenceId> WaitSeen(size_t count, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return seen_.size() >= count;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return seen_;
  }

  // While held, steps wait (before running) until released.
  void HoldSteps(bool held) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }

  // The seed sequence `seq`'s steps carried (0 if it has not run).
  uint64_t SeedOf(SequenceId seq) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = seeds_.find(seq);
    return it == seeds_.end() ? 0 : it->second;
  }

  // Waits up to `timeout` until the workers were told to release `seq`; its
  // cached token count then (prompt + generated - 1), or -1 if not released.
  int64_t WaitReleased(SequenceId seq, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto released = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_.count(seq) > 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout)) return -1;
    return released_.at(seq);
  }

 private:
  class Executor : public StepExecutor {
   public:
    explicit Executor(FakeGenerationBackend* backend) : backend_(backend) {}
    absl::StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan) override {
      if (backend_->options_.step_delay > absl::ZeroDuration()) {
        absl::SleepFor(backend_->options_.step_delay);
      }
      {
        absl::MutexLock lock(&backend_->mu_);
        auto open = [b = backend_]() {
          b->mu_.AssertHeld();  // Await calls it under the lock
          return !b->held_;
        };
        backend_->mu_.Await(absl::Condition(&open));
        for (const StepBatch& batch : plan.batches) {
          for (const StepSpan& span : batch.spans) {
            if (std::find(backend_->seen_.begin(), backend_->seen_.end(), span.seq) ==
                backend_->seen_.end()) {
              backend_->seen_.push_back(span.seq);
            }
            backend_->seeds_[span.seq] = span.sampling.seed;
          }
        }
        for (SequenceId id : plan.release) {
          auto it = fake_.workers.kv.find(id);
          backend_->released_[id] =
              it == fake_.workers.kv.end() ? 0 : static_cast<int64_t>(it->second.size());
        }
      }
      return fake_.RunStep(plan);
    }

   private:
    FakeGenerationBackend* const backend_;
    FakeExecutor fake_;
  };

  const Options options_;
  absl::Mutex mu_;
  int64_t model_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<SequenceId> seen_ ABSL_GUARDED_BY(mu_);
  std::map<SequenceId, uint64_t> seeds_ ABSL_GUARDED_BY(mu_);
  std::map<SequenceId, int64_t> released_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_FAKE_GENERATION_H_
