// GenerationScheduler (scheduler.h): continuous batching of one model's
// sequences over a block-counted KV cache.
#include "server/coordinator/generate/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/coordinator/generate/scheduler_sequence.h"

namespace meshserve {

bool IsRecoverableStepFailure(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsAborted(status) ||
         absl::IsDeadlineExceeded(status);
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<GenerationScheduler>> GenerationScheduler::Create(
    SchedulerOptions options) {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0, got ", v));
  };
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"block_tokens", options.block_tokens},
        {"num_blocks", options.num_blocks},
        {"context_length", options.context_length},
        {"max_prefill_tokens_per_step", options.max_prefill_tokens_per_step},
        {"max_running", options.max_running},
        {"max_step_failures", options.max_step_failures}}) {
    absl::Status s = positive(name, value);
    if (!s.ok()) return s;
  }
  if (options.recovery_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("recovery_timeout must be >= 0, got ",
                                                   absl::FormatDuration(options.recovery_timeout)));
  }
  if (options.max_waiting < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_waiting must be >= 0, got ", options.max_waiting));
  }
  return std::unique_ptr<GenerationScheduler>(new GenerationScheduler(options));
}

GenerationScheduler::GenerationScheduler(SchedulerOptions options)
    : options_(std::move(options)),
      num_blocks_(options_.num_blocks),
      free_blocks_(options_.num_blocks) {}

GenerationScheduler::~GenerationScheduler() = default;

absl::Status GenerationScheduler::CheckRequestLocked(const SequenceRequest& request,
                                                     int64_t waiting) const {
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  const int64_t max_tokens = request.stop.max_tokens;
  if (prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 1, got ", max_tokens));
  }
  const int64_t total = prompt + max_tokens;
  if (total > options_.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_tokens (", max_tokens, ") = ", total,
        " exceeds the model's context of ", options_.context_length));
  }
  // The last token is sampled and never fed: total - 1 positions are cached.
  const int64_t blocks = BlocksFor(total - 1);
  if (blocks > num_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt, " tokens) + max_tokens (", max_tokens, ") needs ", blocks,
        " KV cache blocks of ", options_.block_tokens, " tokens; the cache holds ",
        num_blocks_, " (--kv_cache_bytes)"));
  }
  if (waiting >= options_.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the generation queue is full: ", waiting, " sequences wait (max_waiting ",
        options_.max_waiting, ")"));
  }
  return absl::OkStatus();
}

GenerationScheduler::Sequence& GenerationScheduler::InsertLocked(SequenceRequest request,
                                                                 int64_t version,
                                                                 SequenceSink sink) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->version = version;
  seq->prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  seq->tokens = std::move(request.prompt_ids);
  seq->sampling = request.sampling;
  seq->stop = std::move(request.stop);
  seq->sink = std::move(sink);
  Sequence& ref = *seq;
  sequences_.emplace(ref.id, std::move(seq));
  return ref;
}

absl::StatusOr<SequenceId> GenerationScheduler::Add(SequenceRequest request, int64_t version,
                                                    SequenceSink sink) {
  absl::MutexLock lock(&mu_);
  absl::Status ok = CheckRequestLocked(
      request, static_cast<int64_t>(waiting_.size()) + fork_waiting_);
  if (!ok.ok()) return ok;
  const SequenceId id = InsertLocked(std::move(request), version, std::move(sink)).id;
  waiting_.push_back(id);
  return id;
}

bool GenerationScheduler::Cancel(SequenceId seq) {
  absl::MutexLock lock(&mu_);
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || it->second->cancelled) return false;
  it->second->cancelled = true;
  return true;
}

void GenerationScheduler::CancelAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, seq] : sequences_) seq->cancelled = true;
}

void GenerationScheduler::DropCacheLocked(Sequence& seq) {
  if (seq.blocks > 0 || seq.cached > 0) release_.push_back(seq.id);
  free_blocks_ += seq.blocks;
  seq.blocks = 0;
  seq.cached = 0;
}

void GenerationScheduler::PreemptLocked(SequenceId id) {
  Sequence& seq = *sequences_.at(id);
  DropCacheLocked(seq);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  ++preemptions_;
}

void GenerationScheduler::FinishLocked(SequenceId id, FinishReason reason, absl::Status status,
                                       SequenceEvent event, Delivery& out) {
  auto it = sequences_.find(id);
  Sequence& seq = *it->second;
  UnlinkForkLocked(seq);
  DropCacheLocked(seq);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  event.finish = reason;
  event.status = std::move(status);
  event.prompt_tokens = seq.prompt_len;
  event.completion_tokens = seq.completion();
  event.version = seq.version;
  out.emplace_back(std::move(seq.sink), std::move(event));
  sequences_.erase(it);
}

bool GenerationScheduler::PlanSpanLocked(Sequence& seq, int64_t& prefill_budget,
                                         StepSpan& span) {
  const int64_t todo = seq.known() - seq.cached;
  const bool decode = todo == 1 && seq.cached > 0;
  int64_t n = decode ? 1 : std::min(todo, prefill_budget);
  // A source whose choices wait for its cache stops before the last prompt
  // token (the fork's length): each choice feeds that one itself.
  if (!seq.forks.empty()) n = std::min(n, seq.prompt_len - 1 - seq.cached);
  if (!decode) {
    // A prefill chunk shrinks to the blocks that are free before anything
    // is preempted for it.
    const int64_t room = (seq.blocks + free_blocks_) * options_.block_tokens - seq.cached;
    n = std::min(n, room);
  }
  if (n <= 0) {
    span.token_ids.clear();
    return prefill_budget == 0;  // no budget: wait; no room: preempt
  }
  const int64_t need = BlocksFor(seq.cached + n) - seq.blocks;
  if (need > free_blocks_) return false;
  free_blocks_ -= need;
  seq.blocks += need;
  if (!decode) {
    prefill_budget -= n;
    prefill_tokens_ += n;
  }
  span.seq = seq.id;
  span.past_len = seq.cached;
  span.token_ids.assign(seq.tokens.begin() + seq.cached, seq.tokens.begin() + seq.cached + n);
  span.sample = seq.cached + n == seq.known();
  span.sampling = seq.sampling;
  return true;
}

void GenerationScheduler::PlanRunningLocked(int64_t& prefill_budget,
                                            std::vector<StepSpan>& spans) {
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = *sequences_.at(running_[i]);
    StepSpan span;
    bool planned = PlanSpanLocked(seq, prefill_budget, span);
    while (!planned) {
      // No free block: the newest running sequence gives its blocks back
      // (possibly this one, which then waits).
      const SequenceId victim = running_.back();
      PreemptLocked(victim);
      if (victim == seq.id) break;
      planned = PlanSpanLocked(seq, prefill_budget, span);
    }
    if (planned && !span.token_ids.empty()) spans.push_back(std::move(span));
  }
}

void GenerationScheduler::AdmitWaitingLocked(int64_t& prefill_budget,
                                             std::vector<StepSpan>& spans) {
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running &&
         prefill_budget > 0) {
    Sequence& seq = *sequences_.at(waiting_.front());
    // A sequence joins when the blocks of all its known tokens are free, so
    // that its later chunks do not preempt at once what just ran.
    if (BlocksFor(seq.known()) > free_blocks_) break;
    StepSpan span;
    if (!PlanSpanLocked(seq, prefill_budget, span) || span.token_ids.empty()) break;
    waiting_.pop_front();
    running_.push_back(seq.id);
    spans.push_back(std::move(span));
  }
}

StepPlan GenerationScheduler::NextStep() {
  Delivery out;
  StepPlan plan;
  {
    absl::MutexLock lock(&mu_);
    std::vector<SequenceId> cancelled;
    for (const auto& [id, seq] : sequences_) {
      if (seq->cancelled) cancelled.push_back(id);
    }
    for (SequenceId id : cancelled) {
      FinishLocked(id, FinishReason::kCancelled, absl::OkStatus(), SequenceEvent{}, out);
    }
    int64_t prefill_budget = options_.max_prefill_tokens_per_step;
    std::vector<StepSpan> spans;
    ForkLocked(plan.forks);
    PlanRunningLocked(prefill_budget, spans);
    AdmitWaitingLocked(prefill_budget, spans);
    plan.step = next_step_++;
    plan.release.swap(release_);
    std::map<int64_t, StepBatch> by_version;
    for (StepSpan& span : spans) {
      StepBatch& batch = by_version[sequences_.at(span.seq)->version];
      batch.num_tokens += static_cast<int64_t>(span.token_ids.size());
      batch.spans.push_back(std::move(span));
    }
    for (auto& [version, batch] : by_version) {
      batch.version = version;
      plan.batches.push_back(std::move(batch));
    }
  }
  Deliver(out);
  return plan;
}

void GenerationScheduler::AcceptTokenLocked(Sequence& seq, const SampledToken& token,
                                            Delivery& out) {
  seq.tokens.push_back(token.token_id);
  ++tokens_generated_;
  SequenceEvent event;
  event.token_ids.push_back(token.token_id);
  if (seq.sampling.num_logprobs >= 0) event.logprobs.push_back(token.logprob);
  if (seq.sampling.num_logprobs >= 1) event.top_logprobs.push_back(token.top_logprobs);
  const std::vector<int64_t>& stops = seq.stop.stop_token_ids;
  const std::vector<int64_t>& eos = options_.eos_token_ids;
  FinishReason reason = FinishReason::kNone;
  if (std::find(stops.begin(), stops.end(), token.token_id) != stops.end() ||
      (!seq.stop.ignore_eos && std::find(eos.begin(), eos.end(), token.token_id) != eos.end())) {
    reason = FinishReason::kStop;
  } else if (seq.completion() >= seq.stop.max_tokens ||
             seq.known() >= options_.context_length) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    event.version = seq.version;
    out.emplace_back(seq.sink, std::move(event));
    return;
  }
  FinishLocked(seq.id, reason, absl::OkStatus(), std::move(event), out);
}

void GenerationScheduler::CompleteStep(const StepPlan& plan,
                                       const std::vector<SampledToken>& tokens) {
  std::map<SequenceId, const SampledToken*> by_seq;
  for (const SampledToken& t : tokens) by_seq[t.seq] = &t;
  size_t wanted = 0;
  for (const StepBatch& batch : plan.batches) {
    for (const StepSpan& span : batch.spans) {
      if (!span.sample) continue;
      ++wanted;
      if (by_seq.count(span.seq) == 0) {
        return FailStep(plan, absl::InternalError(absl::StrCat(
                                  "step ", plan.step, " returned no token for sequence ", span.seq)));
      }
    }
  }
  if (wanted != tokens.size() || by_seq.size() != tokens.size()) {
    return FailStep(plan, absl::InternalError(absl::StrCat("step ", plan.step, " returned ",
                                                           tokens.size(), " tokens for ", wanted,
                                                           " sampled sequences")));
  }
  Delivery out;
  {
    absl::MutexLock lock(&mu_);
    for (const StepBatch& batch : plan.batches) {
      for (const StepSpan& span : batch.spans) {
        auto it = sequences_.find(span.seq);
        if (it == sequences_.end()) continue;
        Sequence& seq = *it->second;
        seq.cached = span.past_len + static_cast<int64_t>(span.token_ids.size());
        seq.failures = 0;
        if (span.sample && !seq.cancelled) AcceptTokenLocked(seq, *by_seq.at(span.seq), out);
      }
    }
  }
  Deliver(out);
}

void GenerationScheduler::FailStep(const StepPlan& plan, const absl::Status& status,
                                   bool recoverable) {
  Delivery out;
  {
    absl::MutexLock lock(&mu_);
    std::set<SequenceId> in_plan;
    for (const StepBatch& batch : plan.batches) {
      for (const StepSpan& span : batch.spans) in_plan.insert(span.seq);
    }
    const absl::Time now = absl::Now();
    const std::vector<SequenceId> running = running_;
    for (SequenceId id : running) {
      Sequence& seq = *sequences_.at(id);
      DropCacheLocked(seq);
      if (in_plan.count(id) == 0) continue;
      if (++seq.failures == 1) seq.failing_since = now;
      const absl::Duration failing = now - seq.failing_since;
      if (seq.failures < options_.max_step_failures ||
          (recoverable && failing < options_.recovery_timeout)) {
        continue;
      }
      absl::Status error(
          status.code(),
          absl::StrCat("generation step failed ", seq.failures, " times in a row over ",
                       absl::FormatDuration(failing),
                       recoverable ? " (the cluster did not recover within the recovery timeout "
                                   : " (max_step_failures ",
                       recoverable ? absl::FormatDuration(options_.recovery_timeout)
                                   : absl::StrCat(options_.max_step_failures),
                       "); the last: ", status.message()));
      FinishLocked(id, FinishReason::kError, std::move(error), SequenceEvent{}, out);
    }
  }
  Deliver(out);
}

void GenerationScheduler::SetNumBlocks(int64_t num_blocks) {
  Delivery out;
  {
    absl::MutexLock lock(&mu_);
    if (num_blocks < 1 || num_blocks == num_blocks_) return;
    free_blocks_ += num_blocks - num_blocks_;
    num_blocks_ = num_blocks;
    std::vector<SequenceId> too_big;
    for (const auto& [id, seq] : sequences_) {
      if (BlocksFor(seq->prompt_len + seq->stop.max_tokens - 1) > num_blocks_) {
        too_big.push_back(id);
      }
    }
    for (SequenceId id : too_big) {
      const Sequence& seq = *sequences_.at(id);
      absl::Status error = absl::ResourceExhaustedError(absl::StrCat(
          "the model was placed anew and its KV cache now holds ", num_blocks_,
          " blocks of ", options_.block_tokens, " tokens; prompt (", seq.prompt_len,
          " tokens) + max_tokens (", seq.stop.max_tokens, ") needs more"));
      FinishLocked(id, FinishReason::kError, std::move(error), SequenceEvent{}, out);
    }
    while (free_blocks_ < 0 && !running_.empty()) PreemptLocked(running_.back());
  }
  Deliver(out);
}

void GenerationScheduler::Deliver(Delivery& out) {
  for (auto& [sink, event] : out) {
    if (sink) sink(event);
  }
}

bool GenerationScheduler::HasWork() const {
  absl::MutexLock lock(&mu_);
  return !sequences_.empty() || !release_.empty();
}

std::set<int64_t> GenerationScheduler::LiveVersions() const {
  absl::MutexLock lock(&mu_);
  std::set<int64_t> versions;
  for (const auto& [id, seq] : sequences_) versions.insert(seq->version);
  return versions;
}

GenerationScheduler::Stats GenerationScheduler::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.running = static_cast<int64_t>(running_.size());
  stats.waiting = static_cast<int64_t>(waiting_.size()) + fork_waiting_;
  stats.num_blocks = num_blocks_;
  stats.blocks_used = num_blocks_ - free_blocks_;
  stats.preemptions = preemptions_;
  stats.tokens_generated = tokens_generated_;
  stats.prefill_tokens = prefill_tokens_;
  return stats;
}

}  // namespace meshserve
