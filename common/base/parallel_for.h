// The tree's one fan-out: ParallelFor(n, fn) runs fn(0) ... fn(n - 1) at once
// on the shared ElasticExecutor (elastic_executor.h) and returns when all have
// returned. Each call starts at once and never waits behind another, so the
// calls may block on each other (workers waiting for each other's data, a
// client pushing to every worker); steady use creates no threads, because idle
// executor threads are reused. n == 0 returns at once; n == 1 runs fn(0) on
// the calling thread.
//
// The coordinator's ParallelCall (server/coordinator/fan_out.h) is this over
// worker ids, collecting the results.
//
// Thread-safety: thread-safe. fn runs on several threads at once, so it must
// be safe to call concurrently (each index writing its own slot is).
#ifndef MESHSERVE_COMMON_BASE_PARALLEL_FOR_H_
#define MESHSERVE_COMMON_BASE_PARALLEL_FOR_H_

#include <cstddef>

#include "absl/functional/function_ref.h"

namespace meshserve {

void ParallelFor(size_t n, absl::FunctionRef<void(size_t)> fn);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_PARALLEL_FOR_H_
