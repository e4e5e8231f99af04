// GenerationLoop (generation_loop.h).
#include "server/coordinator/generate/generation_loop.h"

#include <algorithm>
#include <utility>

#include "common/base/logging.h"

namespace meshserve {

GenerationLoop::GenerationLoop(std::unique_ptr<GenerationScheduler> scheduler,
                               StepExecutor* executor, GenerationLoopOptions options)
    : scheduler_(std::move(scheduler)), executor_(executor), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

GenerationLoop::~GenerationLoop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  // Every sequence left gets its last event (kCancelled); nothing runs.
  scheduler_->CancelAll();
  scheduler_->NextStep();
}

absl::StatusOr<SequenceId> GenerationLoop::Add(SequenceRequest request, int64_t version,
                                               SequenceSink sink) {
  absl::StatusOr<SequenceId> id = scheduler_->Add(std::move(request), version, std::move(sink));
  if (id.ok()) Wake();
  return id;
}

absl::StatusOr<std::vector<SequenceId>> GenerationLoop::AddGroup(
    std::vector<SequenceRequest> requests, int64_t version, std::vector<SequenceSink> sinks) {
  if (requests.size() > 1 && executor_->CanFork()) {
    absl::StatusOr<std::vector<SequenceId>> ids =
        scheduler_->AddGroup(std::move(requests), version, std::move(sinks));
    if (ids.ok()) Wake();
    return ids;
  }
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<SequenceId> id = scheduler_->Add(
        std::move(requests[i]), version, i < sinks.size() ? std::move(sinks[i]) : nullptr);
    if (!id.ok()) {
      for (SequenceId added : ids) scheduler_->Cancel(added);
      if (!ids.empty()) Wake();
      return id.status();
    }
    ids.push_back(*id);
  }
  Wake();
  return ids;
}

bool GenerationLoop::Cancel(SequenceId seq) {
  const bool cancelled = scheduler_->Cancel(seq);
  if (cancelled) Wake();
  return cancelled;
}

void GenerationLoop::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void GenerationLoop::Backoff(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
}

void GenerationLoop::Run() {
  absl::Duration backoff = absl::ZeroDuration();  // before the next step
  while (true) {
    if (backoff > absl::ZeroDuration()) Backoff(backoff);
    {
      absl::MutexLock lock(&mu_);
      // Sleeps until woken while nothing runs; a step never waits here.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return woken_ || stopping_; };
      if (!scheduler_->HasWork()) mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      woken_ = false;
    }
    const int64_t num_blocks = executor_->NumBlocks();
    if (num_blocks > 0) scheduler_->SetNumBlocks(num_blocks);
    StepPlan plan = scheduler_->NextStep();
    if (plan.empty()) continue;
    absl::StatusOr<std::vector<SampledToken>> tokens = executor_->RunStep(plan);
    if (tokens.ok()) {
      scheduler_->CompleteStep(plan, *tokens);
      backoff = absl::ZeroDuration();
    } else {
      const bool recoverable = executor_->MayRecover(tokens.status());
      MS_LOG(WARNING) << "generation step " << plan.step << " failed"
                      << (recoverable ? " (the cluster recovers)" : "") << ": "
                      << tokens.status();
      scheduler_->FailStep(plan, tokens.status(), recoverable);
      // Only a cluster that recovers by itself is worth waiting for.
      backoff = !recoverable ? absl::ZeroDuration()
                : backoff == absl::ZeroDuration()
                    ? options_.retry_backoff
                    : std::min(2 * backoff, options_.max_retry_backoff);
    }
  }
}

}  // namespace meshserve
