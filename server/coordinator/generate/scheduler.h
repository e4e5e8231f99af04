// Iteration-level scheduling of one model's generated sequences (continuous
// batching, as in Orca and vLLM): the coordinator's half of token generation.
// The workers hold each sequence's keys and values (common/kvcache); this
// class decides, step by step, which tokens each running sequence feeds them
// and when a sequence starts, waits, is preempted, resumes and ends. It runs
// nothing itself: GenerationLoop (generation_loop.h) turns its StepPlans into
// worker programs and hands back the sampled tokens.
//
// A sequence's tokens are its prompt and the tokens sampled so far ("known",
// kept here for the sequence's whole life); `cached` of them have keys and
// values on the workers. A step feeds every running sequence a span of its
// known tokens from `cached` on:
//   - decode: the one token sampled last step;
//   - prefill: a chunk of a prompt (or, after a preemption or a lost worker,
//     of prompt + completion: the cache is rebuilt by recomputing it), at most
//     `max_prefill_tokens_per_step` prefill tokens in a step over all spans.
// A span that reaches the end of the known tokens asks for the next token to
// be sampled at position `known` (the counter of the sampler's random draws,
// so a sequence's draws do not depend on batching, preemption or mesh).
//
// Memory. The workers' caches hand out blocks of `block_tokens` positions;
// the scheduler keeps the same count (`num_blocks`, the smallest pool of the
// model's workers). A sequence holds ceil(cached_after_step / block_tokens)
// blocks. When a running sequence needs a block and none is free, the newest
// running sequences are preempted (their blocks freed, their tokens kept) and
// resumed first when blocks free up; sequences are never failed for memory.
// New sequences wait in a bounded FIFO queue (kResourceExhausted when full)
// and join at a step boundary when a slot, prefill budget and the blocks of
// their first chunk are free.
//
// Refused at Add, with the numbers: an empty prompt, max_tokens < 1,
// prompt + max_tokens past the context, or a sequence that could not fit the
// whole cache even alone (kInvalidArgument: it can never run).
//
// Versions. A sequence runs under the weight version it was added with, from
// its first token to its last: a step holds one batch per version, each run
// as one program over that version's params. LiveVersions() names the
// versions that sequences still hold, so the coordinator frees the others.
//
// Thread-safety: thread-safe. Add and Cancel come from request threads;
// NextStep / CompleteStep / FailStep from the one loop that runs the steps
// (a step's plan must be completed or failed before the next NextStep).
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/sampling/sampling_params.h"

namespace meshserve {

using SequenceId = int64_t;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

// "stop", "length", "cancelled", "error" ("" for kNone).
const char* FinishReasonName(FinishReason reason);

// What Add takes: one sequence to generate.
struct SequenceRequest {
  std::vector<int64_t> prompt_ids;
  SamplingParams sampling;
  StopParams stop;
};

// One of the most likely tokens at a sampled position, with its
// log-probability under the model's distribution (log_softmax of the raw
// logits, before temperature, top_k and top_p).
struct TopLogprob {
  int64_t token_id = 0;
  float logprob = 0;
  bool operator==(const TopLogprob& o) const {
    return token_id == o.token_id && logprob == o.logprob;
  }
};

// What a sequence's sink receives, outside any lock, in the order of steps:
// the ids sampled in a step (one per step; the stop token that ended a
// sequence included), and with the last event the finish reason, counts and
// version. A sink is called from the loop's thread.
struct SequenceEvent {
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;  // parallel to token_ids when asked for
  // Parallel to token_ids when num_logprobs = N >= 1: each position's N most
  // likely tokens (fewer when fewer ids are valid), most likely first.
  std::vector<std::vector<TopLogprob>> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;  // kError only
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t version = 0;
};
using SequenceSink = std::function<void(const SequenceEvent&)>;

// The tokens one sequence feeds in a step.
struct StepSpan {
  SequenceId seq = 0;
  int64_t past_len = 0;             // positions already cached on the workers
  std::vector<int64_t> token_ids;   // at positions past_len, past_len + 1, ...
  bool sample = false;              // sample the token at past_len + size
  SamplingParams sampling;
};

// The spans of one weight version: one program run.
struct StepBatch {
  int64_t version = 0;
  std::vector<StepSpan> spans;
  int64_t num_tokens = 0;  // sum of the spans' token counts
};

// n choices of one prompt share its prefill (GenerationScheduler::AddGroup):
// the first prefills the prompt but its last token, then the workers give
// each of `dsts` a copy of the first `num_tokens` positions of `src`'s cache
// (KvCacheStore::Fork), and every choice feeds the last prompt token and
// samples with its own seed. Forks run before the plan's releases (a source
// released in the same step is copied first).
struct StepFork {
  SequenceId src = 0;
  std::vector<SequenceId> dsts;
  int64_t num_tokens = 0;
};

struct StepPlan {
  int64_t step = 0;
  std::vector<StepFork> forks;
  // Sequences whose caches the workers free before this step (finished,
  // cancelled, preempted or reset since the last step).
  std::vector<SequenceId> release;
  std::vector<StepBatch> batches;
  // Nothing to run and nothing to free.
  bool empty() const { return batches.empty() && release.empty() && forks.empty(); }
  // Caches to free and nothing to run: the plan after the last sequence ended
  // or was cancelled (NextStep plans every running and admissible sequence,
  // so a plan without batches means nothing else runs or waits to run).
  bool release_only() const { return batches.empty() && forks.empty() && !release.empty(); }
};

// One sampled token, for a span with `sample`.
struct SampledToken {
  SequenceId seq = 0;
  int64_t token_id = 0;
  float logprob = 0;
  std::vector<TopLogprob> top_logprobs;  // num_logprobs = N >= 1: up to N
};

struct SchedulerOptions {
  int64_t block_tokens = 16;
  int64_t num_blocks = 0;  // > 0
  int64_t context_length = 0;  // > 0: the model's positions
  int64_t max_prefill_tokens_per_step = 512;  // > 0
  int64_t max_running = 256;  // > 0: sequences in one step
  int64_t max_waiting = 1024;  // >= 0: the queue's bound
  std::vector<int64_t> eos_token_ids;  // the checkpoint's (ignore_eos skips them)
  // A sequence ends with kError when its steps failed max_step_failures times
  // in a row, and, when the failure is one the cluster may recover from (a
  // worker lost, the model being re-placed: FailStep's `recoverable`), only
  // once they have also failed for recovery_timeout without a success.
  int64_t max_step_failures = 3;  // > 0
  absl::Duration recovery_timeout = absl::Seconds(30);  // >= 0
};

// kUnavailable, kAborted, kDeadlineExceeded: the codes of a step that failed
// because a worker was lost or the model is being placed anew, which the
// coordinator recovers from by itself (it re-places the model).
bool IsRecoverableStepFailure(const absl::Status& status);

class GenerationScheduler {
 public:
  // \error kInvalidArgument naming a bad option.
  static absl::StatusOr<std::unique_ptr<GenerationScheduler>> Create(SchedulerOptions options);
  ~GenerationScheduler();

  // Queues a sequence under `version`. \error kInvalidArgument (see the file
  // comment), kResourceExhausted when max_waiting sequences wait.
  absl::StatusOr<SequenceId> Add(SequenceRequest request, int64_t version, SequenceSink sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues n sequences of one prompt (all `requests` have the same
  // prompt_ids; each its own sampling, e.g. seed + i, and stops) that share
  // its prefill: the first prefills the prompt but its last token, the others
  // get copies of that cache (StepPlan::forks) when it is there, then each
  // feeds the last prompt token and samples. Their tokens equal those of n
  // separate Adds. A choice that cannot be forked then (no running slot or
  // free block), or whose source ends first, prefills alone. A prompt of one
  // token has nothing to share: n plain Adds. \error Add's for any request
  //   (nothing is queued then), kInvalidArgument for differing prompts or a
  //   sink count other than the requests'.
  absl::StatusOr<std::vector<SequenceId>> AddGroup(std::vector<SequenceRequest> requests,
                                                   int64_t version,
                                                   std::vector<SequenceSink> sinks)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a sequence at the next step boundary (its sink gets kCancelled).
  // False for an unknown or finished id.
  bool Cancel(SequenceId seq) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel for every sequence (a model unloaded, a server stopping).
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_);

  // The next step (empty when no sequence runs or waits).
  StepPlan NextStep() ABSL_LOCKS_EXCLUDED(mu_);
  // Applies a step's sampled tokens (one per span with `sample`; a missing or
  // extra one fails the step as FailStep does) and delivers the events.
  void CompleteStep(const StepPlan& plan, const std::vector<SampledToken>& tokens)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A step that did not run (a worker lost, a program error): every running
  // sequence's cache is dropped and rebuilt from its tokens by the next steps
  // (on whatever layout the workers have then). A sequence in the plan whose
  // steps failed too often (SchedulerOptions::max_step_failures, and
  // recovery_timeout when `recoverable`) ends with kError: `status`'s code, a
  // message naming the failures and `status`'s.
  void FailStep(const StepPlan& plan, const absl::Status& status, bool recoverable = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The workers' smallest pool now holds `num_blocks` (> 0; the model placed
  // anew on another mesh: a device's heads, and so a block's bytes, or the
  // devices per worker changed). When fewer blocks than are held remain, the
  // newest running sequences are preempted (resumed by recomputing); a
  // sequence that can no longer fit even alone ends with kResourceExhausted
  // naming the numbers. Between steps (from the loop).
  void SetNumBlocks(int64_t num_blocks) ABSL_LOCKS_EXCLUDED(mu_);

  // True when a sequence runs or waits (a cancelled one counts until the next
  // step releases it).
  bool HasWork() const ABSL_LOCKS_EXCLUDED(mu_);
  std::set<int64_t> LiveVersions() const ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int64_t running = 0;
    int64_t waiting = 0;
    int64_t blocks_used = 0;
    int64_t num_blocks = 0;
    int64_t preemptions = 0;  // since creation
    int64_t tokens_generated = 0;  // since creation
    // Tokens fed by prefill spans (prompts, and caches rebuilt after a
    // preemption or a failed step; not a choice's fed last prompt token after
    // a fork), since creation: n choices sharing a prompt of L tokens add
    // L - 1, n separate sequences n * L.
    int64_t prefill_tokens = 0;
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Sequence;
  using Delivery = std::vector<std::pair<SequenceSink, SequenceEvent>>;

  explicit GenerationScheduler(SchedulerOptions options);
  // Add's checks of one request (`waiting`: the sequences queued before it).
  absl::Status CheckRequestLocked(const SequenceRequest& request, int64_t waiting) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the sequence (not queued yet).
  Sequence& InsertLocked(SequenceRequest request, int64_t version, SequenceSink sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The forks due now (scheduler_fork.cc): each source holding its prompt
  // but the last token hands its waiting choices a copy, or lets them
  // prefill alone; the forked choices join running_.
  void ForkLocked(std::vector<StepFork>& forks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sequence that ends or waits no more for its fork (FinishLocked): it
  // leaves its source's list, and a source's waiting choices prefill alone.
  void UnlinkForkLocked(Sequence& seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + options_.block_tokens - 1) / options_.block_tokens;
  }
  // Frees seq's blocks and cache (its tokens stay); it goes to `release`.
  void DropCacheLocked(Sequence& seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PreemptLocked(SequenceId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends seq: `event` (its last tokens, if any) completed with the reason
  // and counts joins `out`; seq leaves running/waiting and is erased.
  void FinishLocked(SequenceId id, FinishReason reason, absl::Status status, SequenceEvent event,
                    Delivery& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans the span seq feeds now within `prefill_budget` (updated) and grows
  // its blocks. An empty span: no prefill budget is left. False: no block is
  // free for even one token (the caller preempts).
  bool PlanSpanLocked(Sequence& seq, int64_t& prefill_budget, StepSpan& span)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanRunningLocked(int64_t& prefill_budget, std::vector<StepSpan>& spans)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdmitWaitingLocked(int64_t& prefill_budget, std::vector<StepSpan>& spans)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends one sampled token to `seq` and ends it on a stop or a limit.
  void AcceptTokenLocked(Sequence& seq, const SampledToken& token, Delivery& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Deliver(Delivery& out);

  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  SequenceId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t num_blocks_ ABSL_GUARDED_BY(mu_);  // options_.num_blocks, then SetNumBlocks
  int64_t free_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_ ABSL_GUARDED_BY(mu_);
  std::vector<SequenceId> running_ ABSL_GUARDED_BY(mu_);  // admission order
  std::deque<SequenceId> waiting_ ABSL_GUARDED_BY(mu_);   // preempted ones first
  std::vector<SequenceId> release_ ABSL_GUARDED_BY(mu_);
  int64_t fork_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // choices waiting for their fork
  int64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_generated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefill_tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_H_
