// GenerationScheduler's shared prefills (scheduler.h AddGroup): n choices of
// one prompt prefill it once. The first choice (the source) prefills the
// prompt but its last token, L - 1 positions; at the next step boundary each
// other choice gets a copy of those positions (StepFork, run by the workers
// before the step's spans) and joins the running sequences with cached =
// L - 1, so every choice then feeds the last prompt token and samples its
// first token at position L with its own sampling parameters, exactly as it
// would have alone (draws are counted by seed and position). Prefill work:
// L - 1 + n tokens instead of n * L.
//
// A choice is forked only when a running slot and the blocks of L - 1
// positions are free; otherwise, or when its source ends before the fork
// (cancelled, refused after a re-placement), it prefills alone from the
// waiting queue's front. A source preempted or failed before the fork keeps
// its choices waiting until it holds L - 1 positions again.
//
// Thread-safety: as scheduler.h (every function here runs under mu_).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/coordinator/generate/scheduler.h"
#include "server/coordinator/generate/scheduler_sequence.h"

namespace meshserve {

absl::StatusOr<std::vector<SequenceId>> GenerationScheduler::AddGroup(
    std::vector<SequenceRequest> requests, int64_t version, std::vector<SequenceSink> sinks) {
  if (sinks.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AddGroup: ", requests.size(),
                                                   " requests but ", sinks.size(), " sinks"));
  }
  absl::MutexLock lock(&mu_);
  const int64_t waiting = static_cast<int64_t>(waiting_.size()) + fork_waiting_;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt_ids != requests[0].prompt_ids) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddGroup: request ", i, "'s prompt differs from request 0's"));
    }
    absl::Status ok = CheckRequestLocked(requests[i], waiting + static_cast<int64_t>(i));
    if (!ok.ok()) return ok;
  }
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    Sequence& seq = InsertLocked(std::move(requests[i]), version, std::move(sinks[i]));
    ids.push_back(seq.id);
    if (i == 0 || seq.prompt_len < 2) {  // one token: nothing to share
      waiting_.push_back(seq.id);
      continue;
    }
    seq.fork_src = ids[0];
    sequences_.at(ids[0])->forks.push_back(seq.id);
    ++fork_waiting_;
  }
  return ids;
}

void GenerationScheduler::ForkLocked(std::vector<StepFork>& forks) {
  // Sources in admission order; a forked choice joins running_ behind them.
  const std::vector<SequenceId> running = running_;
  for (SequenceId id : running) {
    Sequence& src = *sequences_.at(id);
    const int64_t len = src.prompt_len - 1;
    if (src.forks.empty() || src.cached < len) continue;
    StepFork fork{src.id, {}, len};
    for (SequenceId choice_id : src.forks) {
      Sequence& choice = *sequences_.at(choice_id);
      choice.fork_src = 0;
      --fork_waiting_;
      const int64_t blocks = BlocksFor(len);
      if (static_cast<int64_t>(running_.size()) >= options_.max_running ||
          blocks > free_blocks_) {
        waiting_.push_front(choice_id);  // prefills alone, first in line
        continue;
      }
      free_blocks_ -= blocks;
      choice.blocks = blocks;
      choice.cached = len;
      running_.push_back(choice_id);
      fork.dsts.push_back(choice_id);
    }
    src.forks.clear();
    if (!fork.dsts.empty()) forks.push_back(std::move(fork));
  }
}

void GenerationScheduler::UnlinkForkLocked(Sequence& seq) {
  if (seq.fork_src != 0) {
    auto src = sequences_.find(seq.fork_src);
    if (src != sequences_.end()) {
      std::vector<SequenceId>& f = src->second->forks;
      f.erase(std::remove(f.begin(), f.end(), seq.id), f.end());
    }
    seq.fork_src = 0;
    --fork_waiting_;
  }
  for (SequenceId choice_id : seq.forks) {
    sequences_.at(choice_id)->fork_src = 0;
    --fork_waiting_;
    waiting_.push_front(choice_id);
  }
  seq.forks.clear();
}

}  // namespace meshserve
