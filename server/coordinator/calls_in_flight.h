// One request's Execute calls to its workers while they run
// (coordinator_infer.cc starts them, WorkerClient::ExecuteAsync finishes
// them), and the wait for them.
//
// CallsInFlight is shared between the request and the calls' completion
// callbacks: a callback outlives the request when it gives up a lost worker.
// A request that holds no thread while its calls run
// (coordinator_infer_async.cc) gives OnSettled a function: it runs once, on
// the thread of the callback that settles the calls (the last one to finish,
// or the first to fail), or at once when they have settled already, unless
// Claim() was called first (the request's watch claims the calls when they
// run long, and waits for them on a thread).
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_COORDINATOR_CALLS_IN_FLIGHT_H_
#define MESHSERVE_SERVER_COORDINATOR_CALLS_IN_FLIGHT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class CallsInFlight {
 public:
  explicit CallsInFlight(size_t n);

  // Runs `on_settled` once the calls settle (see above); at most once per
  // CallsInFlight.
  void OnSettled(std::function<void()> on_settled) ABSL_LOCKS_EXCLUDED(mu_);
  // Call `index` ended with `result`.
  void Finish(size_t index, absl::StatusOr<ExecuteResult> result) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the calls from `on_settled`: true when it has not run and now never
  // will; false when it ran or runs now.
  bool Claim() ABSL_LOCKS_EXCLUDED(mu_);
  // Settled with every call returned and none failed.
  bool AllOk() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for every call (ids[i]: the worker of call i). The first failure
  // cancels the request on every other worker at once (cancel_others), so
  // peers blocked on a receive from it return now instead of at the
  // deadline. A worker the registry declares dead or suspect (missed
  // heartbeats, another request saw it fail) while its call is in flight is
  // given up at once: its peers are cancelled and the request fails over
  // instead of waiting for a stalled worker's deadline; its call finishes
  // later on its own. Returns the index of the call given up, or -1; sets
  // the first failed call and its status, or -1 when a call was given up
  // before any failed (the peers' failures then answer its cancellation:
  // ABORTED "cancelled", not a cause). A first failure that is ABORTED gives
  // way to a later one that is not (its cause, e.g. a peer's
  // RESOURCE_EXHAUSTED). Returns at once, without blocking, when AllOk().
  int Wait(const std::vector<int64_t>& ids, const WorkerRegistry& registry,
           absl::FunctionRef<void(int64_t failed)> cancel_others, int* first_failed,
           absl::Status* first_status) ABSL_LOCKS_EXCLUDED(mu_);
  // The results, in call order; only after Wait found no failure.
  std::vector<absl::StatusOr<ExecuteResult>> TakeResults() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool Settled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return remaining_ == 0 || first_failed_ >= 0;
  }

  mutable absl::Mutex mu_;
  std::vector<absl::StatusOr<ExecuteResult>> results_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  int first_failed_ ABSL_GUARDED_BY(mu_) = -1;  // index of the first failed call
  std::function<void()> on_settled_ ABSL_GUARDED_BY(mu_);
  bool claimed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_CALLS_IN_FLIGHT_H_
