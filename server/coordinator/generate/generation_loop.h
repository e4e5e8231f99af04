// The thread that runs one model's generation steps: it takes the
// scheduler's next StepPlan, has a StepExecutor run it on the workers (free
// the released caches, run each batch's program, sample) and hands the
// sampled tokens back, step after step, while sequences run or wait.
//
//   request threads:  loop.Add(...) / loop.Cancel(id)   (wake the loop)
//   loop thread:      NextStep -> executor.RunStep -> CompleteStep | FailStep
//                     (sinks are called here, in step order)
//
// When the last sequence ends (or is cancelled) the loop runs one more step
// at once, of releases only, so that the workers free its KV blocks without
// waiting for a next request (GenerationScheduler::HasWork counts pending
// releases as work).
//
// A failed step (a worker lost, a program error) is FailStep: the caches are
// rebuilt by recomputing them from the tokens the scheduler keeps, on the
// placement the executor uses next, and the streams go on. After a failure
// the cluster may recover from (StepExecutor::MayRecover) the loop waits
// before the next step, retry_backoff doubling with each such failure in a row
// up to max_retry_backoff, so that the coordinator has the time to notice a
// dead worker and place the model anew (the scheduler bounds how long a
// sequence waits for that: SchedulerOptions::recovery_timeout).
//
// Thread-safety: Add, Cancel and Stats are thread-safe. The destructor stops
// the thread after its current step and ends every sequence left with
// kCancelled (its sink still gets its last event).
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_LOOP_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_LOOP_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/generate/scheduler.h"

namespace meshserve {

// Runs a step on the workers. Called from the loop's thread only.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Frees plan.release's caches, runs each batch as one program and returns
  // one token per span with `sample`. An error fails the whole step.
  // Releases may ride the plan's first batch; a plan of releases only
  // (StepPlan::release_only: the last sequence ended or was cancelled, and
  // nothing else runs or waits) must reach the workers now, as a step with
  // no spans: no later batch may come before the next request, and until
  // then the workers would hold the sequences' KV blocks.
  virtual absl::StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan) = 0;
  // Whether the cluster may recover from a step's `failure` by itself (a
  // worker lost: the coordinator places the model anew), so that sequences
  // wait for it (SchedulerOptions::recovery_timeout) instead of ending after
  // max_step_failures.
  virtual bool MayRecover(const absl::Status& failure) const { return false; }
  // The KV blocks of the workers' smallest pool on the placement the next
  // step runs on (0: unknown or unchanged). Before every step.
  virtual int64_t NumBlocks() { return 0; }
  // Whether RunStep runs StepPlan::forks (a fork group's shared prefill,
  // GenerationScheduler::AddGroup); without it the loop adds a group's
  // sequences one by one.
  virtual bool CanFork() const { return false; }
};

struct GenerationLoopOptions {
  absl::Duration retry_backoff = absl::Milliseconds(20);  // after the first failed step
  absl::Duration max_retry_backoff = absl::Seconds(1);
};

class GenerationLoop {
 public:
  // `executor` must outlive the loop.
  GenerationLoop(std::unique_ptr<GenerationScheduler> scheduler, StepExecutor* executor,
                 GenerationLoopOptions options = {});
  ~GenerationLoop();
  GenerationLoop(const GenerationLoop&) = delete;
  GenerationLoop& operator=(const GenerationLoop&) = delete;

  // GenerationScheduler::Add, then the loop wakes.
  absl::StatusOr<SequenceId> Add(SequenceRequest request, int64_t version, SequenceSink sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // GenerationScheduler::AddGroup when the executor can fork, else Add for
  // each (the ones added are cancelled when one fails); then the loop wakes.
  absl::StatusOr<std::vector<SequenceId>> AddGroup(std::vector<SequenceRequest> requests,
                                                   int64_t version,
                                                   std::vector<SequenceSink> sinks)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Cancel(SequenceId seq) ABSL_LOCKS_EXCLUDED(mu_);
  GenerationScheduler::Stats Stats() const { return scheduler_->GetStats(); }
  std::set<int64_t> LiveVersions() const { return scheduler_->LiveVersions(); }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // Sleeps `wait` or until the loop stops.
  void Backoff(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<GenerationScheduler> scheduler_;
  StepExecutor* const executor_;
  const GenerationLoopOptions options_;
  absl::Mutex mu_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_LOOP_H_
