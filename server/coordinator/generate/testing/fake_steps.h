// Fake workers for the generation tests: they keep each sequence's fed
// tokens (the KV cache's stand-in) and "sample" a token that is a function of
// the whole cached history, so a sequence's tokens equal Reference(...) only
// if every step fed exactly the right tokens at the right positions.
//
// Thread-safety: FakeWorkers and FakeExecutor are used from one loop thread,
// except FakeExecutor::Released/AwaitReleased (any thread: a mutex).
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_FAKE_STEPS_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_FAKE_STEPS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/generate/generation_loop.h"

namespace meshserve {
namespace testing {

// The token the fake model samples after `tokens`.
inline int64_t NextToken(const std::vector<int64_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  return static_cast<int64_t>((h >> 17) % 50);
}
inline constexpr int64_t kVocab = 50;

// The tokens a sequence generates alone.
inline std::vector<int64_t> Reference(std::vector<int64_t> prompt, int64_t max_tokens,
                                      const std::vector<int64_t>& stops) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    const int64_t t = NextToken(prompt);
    out.push_back(t);
    prompt.push_back(t);
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
  }
  return out;
}

// The top N the fake model reports after sampling `token` (num_logprobs N):
// ids token, token + 1, ... (mod kVocab) with logprobs -1.5, -2.5, ...: the
// sampled token is the most likely, with the logprob -1.5 it samples with.
inline std::vector<TopLogprob> FakeTopLogprobs(int64_t token, int32_t num_logprobs) {
  std::vector<TopLogprob> top;
  for (int32_t i = 0; i < num_logprobs; ++i) {
    top.push_back({(token + i) % kVocab, -1.5f - static_cast<float>(i)});
  }
  return top;
}

struct FakeWorkers {
  std::map<SequenceId, std::vector<int64_t>> kv;
  std::vector<std::string> errors;
  int64_t max_prefill_seen = 0;
  std::map<SequenceId, uint64_t> seeds;  // the seed each sequence's spans carried
  std::set<SequenceId> released;  // every sequence a step freed
  int64_t release_only_steps = 0;  // steps with releases and no batch

  int64_t prefill_tokens = 0;  // fed by spans that are not one decode token
  int64_t forked = 0;  // sequences given a copy of another's cache

  std::vector<SampledToken> Run(const StepPlan& plan) {
    // Forks before releases, as the workers run them (scheduler.h StepFork).
    for (const StepFork& fork : plan.forks) {
      const std::vector<int64_t>& src = kv[fork.src];
      if (static_cast<int64_t>(src.size()) < fork.num_tokens) {
        errors.push_back(absl::StrCat("fork of seq ", fork.src, " at ", fork.num_tokens,
                                      " but ", src.size(), " cached"));
      }
      for (SequenceId dst : fork.dsts) {
        kv[dst].assign(src.begin(), src.begin() + std::min<int64_t>(fork.num_tokens,
                                                                   src.size()));
        ++forked;
      }
    }
    for (SequenceId id : plan.release) {
      kv.erase(id);
      released.insert(id);
    }
    if (plan.batches.empty() && !plan.release.empty()) ++release_only_steps;
    std::vector<SampledToken> out;
    for (const StepBatch& batch : plan.batches) {
      int64_t prefill = 0;
      for (const StepSpan& span : batch.spans) {
        std::vector<int64_t>& cache = kv[span.seq];
        seeds[span.seq] = span.sampling.seed;
        if (span.past_len != static_cast<int64_t>(cache.size())) {
          errors.push_back(absl::StrCat("seq ", span.seq, " past_len ", span.past_len, " but ",
                                        cache.size(), " cached"));
        }
        if (span.past_len == 0 || span.token_ids.size() > 1) {
          prefill += static_cast<int64_t>(span.token_ids.size());
          prefill_tokens += static_cast<int64_t>(span.token_ids.size());
        }
        cache.insert(cache.end(), span.token_ids.begin(), span.token_ids.end());
        if (span.sample) {
          const int64_t token = NextToken(cache);
          out.push_back({span.seq, token, -1.5f,
                         FakeTopLogprobs(token, span.sampling.num_logprobs)});
        }
      }
      max_prefill_seen = std::max(max_prefill_seen, prefill);
    }
    return out;
  }
};

// Fails steps fail_at_step .. fail_at_step + fail_steps - 1 (fail_steps < 0:
// every step from fail_at_step on) with `failure`, losing every cache, as a
// dead worker does (the later ones: the model not re-placed yet); MayRecover
// says `recoverable`.
class FakeExecutor : public StepExecutor {
 public:
  bool CanFork() const override { return can_fork; }
  bool can_fork = true;  // FakeWorkers copy caches (StepPlan::forks)
  absl::StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan) override {
    ++steps;
    if (fail_at_step > 0 && steps >= fail_at_step &&
        (fail_steps < 0 || steps < fail_at_step + fail_steps)) {
      workers.kv.clear();  // a worker died with every cache
      ++failed;
      return failure;
    }
    std::vector<SampledToken> tokens = workers.Run(plan);
    absl::MutexLock lock(&mu_);
    released_.insert(plan.release.begin(), plan.release.end());
    return tokens;
  }
  // Whether a step that ran freed `seq` on the workers; AwaitReleased waits
  // up to `timeout` for it (a bound against a hang, not a timing check).
  bool Released(SequenceId seq) const {
    absl::MutexLock lock(&mu_);
    return released_.count(seq) > 0;
  }
  bool AwaitReleased(SequenceId seq, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto freed = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_.count(seq) > 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&freed), timeout);
  }
  bool MayRecover(const absl::Status&) const override { return recoverable; }
  FakeWorkers workers;
  int64_t steps = 0;
  int64_t failed = 0;
  int64_t fail_at_step = -1;
  int64_t fail_steps = 1;
  absl::Status failure = absl::UnavailableError("worker 1 lost");
  bool recoverable = false;

 private:
  mutable absl::Mutex mu_;
  std::set<SequenceId> released_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_FAKE_STEPS_H_
