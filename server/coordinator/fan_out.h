// The coordinator's one way to call many workers at once, and its one
// definition of a lost worker.
//
// ParallelCall(worker_ids, fn) runs fn(id) for every id at once through
// ParallelFor (common/base/parallel_for.h, the shared ElasticExecutor) and
// returns the results in the order of worker_ids. Each call starts at once and never waits behind
// another call, because the calls of one request block on workers that wait
// for each other's data. Steady traffic creates no threads: idle executor
// threads are reused.
//
// IsWorkerFailure(status) classifies a WorkerClient error (worker_client.h):
//
//   code                 IsWorkerFailure   meaning
//   kUnavailable         true              worker unreachable or gone
//   kDeadlineExceeded    true              worker did not answer in time
//   kCancelled           true              the call was cancelled on the way
//   anything else        false             the worker answered with an error
//
// A worker failure makes the coordinator mark the worker suspect. The control
// loop probes it, and the request fails with kUnavailable and is retried.
//
// Thread-safety: thread-safe. fn runs on several threads at once, so it must
// be safe to call concurrently.
#ifndef MESHSERVE_SERVER_COORDINATOR_FAN_OUT_H_
#define MESHSERVE_SERVER_COORDINATOR_FAN_OUT_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/parallel_for.h"

namespace meshserve {

bool IsWorkerFailure(const absl::Status& status);

// fn: int64_t worker_id -> R, where R is default-constructible (absl::Status,
// absl::StatusOr<T>). Returns fn(worker_ids[i]) at index i.
template <typename Fn>
auto ParallelCall(absl::Span<const int64_t> worker_ids, Fn&& fn)
    -> std::vector<std::invoke_result_t<Fn&, int64_t>> {
  std::vector<std::invoke_result_t<Fn&, int64_t>> results(worker_ids.size());
  ParallelFor(worker_ids.size(), [&](size_t i) { results[i] = fn(worker_ids[i]); });
  return results;
}

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_FAN_OUT_H_
