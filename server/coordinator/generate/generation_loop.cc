// GenerationLoop (generation_loop.h).
#include "server/coordinator/generate/generation_loop.h"

#include <utility>

namespace meshserve {

GenerationLoop::GenerationLoop(std::unique_ptr<GenerationScheduler> scheduler,
                               StepExecutor* executor)
    : scheduler_(std::move(scheduler)), executor_(executor) {
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

bool GenerationLoop::Cancel(SequenceId seq) {
  const bool cancelled = scheduler_->Cancel(seq);
  if (cancelled) Wake();
  return cancelled;
}

void GenerationLoop::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void GenerationLoop::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Sleeps until woken while nothing runs; a step never waits here.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return woken_ || stopping_; };
      if (!scheduler_->HasWork()) mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      woken_ = false;
    }
    StepPlan plan = scheduler_->NextStep();
    if (plan.empty()) continue;
    absl::StatusOr<std::vector<SampledToken>> tokens = executor_->RunStep(plan);
    if (tokens.ok()) {
      scheduler_->CompleteStep(plan, *tokens);
    } else {
      scheduler_->FailStep(plan, tokens.status());
    }
  }
}

}  // namespace meshserve
