// GenerationScheduler's per-sequence state (scheduler.h), shared by the
// scheduler's two source files (scheduler.cc, scheduler_fork.cc). Private to
// the scheduler: nothing else includes it.
//
// Thread-safety: guarded by the scheduler's mutex.
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_SEQUENCE_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_SEQUENCE_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/coordinator/generate/scheduler.h"

namespace meshserve {

struct GenerationScheduler::Sequence {
  SequenceId id = 0;
  int64_t version = 0;
  std::vector<int64_t> tokens;  // prompt, then completion
  int64_t prompt_len = 0;
  SamplingParams sampling;
  StopParams stop;
  SequenceSink sink;
  int64_t cached = 0;  // positions with keys and values on the workers
  int64_t blocks = 0;  // blocks held for them
  int64_t failures = 0;  // consecutive failed steps
  absl::Time failing_since = absl::InfinitePast();  // the first of them
  bool cancelled = false;
  // AddGroup: a choice waiting for a copy of `fork_src`'s cache (in neither
  // running_ nor waiting_ meanwhile), or the source's waiting choices.
  SequenceId fork_src = 0;
  std::vector<SequenceId> forks;

  int64_t completion() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t known() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_SCHEDULER_SEQUENCE_H_
