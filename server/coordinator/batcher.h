// Dynamic batching of one model's requests (the model file's "batching" key,
// common/model/batching_config.h), after Triton's dynamic batcher.
//
// Batcher::Infer takes a request that already passed ValidateInferRequest.
// Requests with the same batch key -- every input's dims except the leading
// (batch) one, the out_shardings and the requested outputs -- and with one
// leading dim shared by all of their inputs are collected into a batch: the
// first one waits up to max_queue_delay_us (less when the batch fills to
// max_batch_size rows) and then until fewer than max_concurrent_batches of
// the model's batches are executing (default 1, as one Triton model instance;
// requests keep joining while it waits). A batch that had to wait for a slot
// then waits up to max_queue_delay_us more (unless full) before it starts: the
// clients of the batch that just ended send their next rows in that window,
// which would otherwise start a batch of their own (closed-loop clients
// settle into alternating half batches then: docs/PERFORMANCE.md). Then the
// batch's inputs are concatenated along dim 0,
// run once through `run` (the unbatched path) and every output is split back
// along dim 0, so each request gets the rows it would get alone (the model must
// treat rows independently, which is what enabling batching declares). A
// request that does not fit a batch (more rows than max_batch_size, or inputs
// with different leading dims) runs alone.
//
// Errors stay per request: validation happens before a request is queued; a
// request whose deadline passes while it is queued gets kDeadlineExceeded
// without running; only a failure of the batch's execution itself (e.g. a
// worker lost) is every member's. More than max_queue_size queued requests:
// kResourceExhausted. Each answer carries batch_size (rows of the execution
// it was part of) and queue_us (time from arrival to the batch's start).
//
// Thread-safety: thread-safe; Infer blocks its caller until the answer. `run`
// is called without the lock held, from the thread of the batch's first
// request; up to max_concurrent_batches batches run at once, requests that
// run alone concurrently.
#ifndef MESHSERVE_SERVER_COORDINATOR_BATCHER_H_
#define MESHSERVE_SERVER_COORDINATOR_BATCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model/batching_config.h"
#include "server/coordinator/infer_request.h"

namespace meshserve {

class Batcher {
 public:
  // Runs one request (possibly a concatenated batch) unbatched.
  using RunFn = std::function<absl::StatusOr<InferResponse>(const InferRequest&)>;

  Batcher(BatchingConfig config, RunFn run);
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `v` is ValidateInferRequest's result for `request`; `timeout` (> 0) the
  // request's time budget, counted from now.
  absl::StatusOr<InferResponse> Infer(const InferRequest& request, const ValidatedRequest& v,
                                      absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending;
  struct Group;
  // Runs the members of a closed group (expired ones answered at once).
  void RunGroup(const Group& group, absl::Time started) ABSL_LOCKS_EXCLUDED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_ < config_.max_concurrent_batches;
  }

  const BatchingConfig config_;
  const RunFn run_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Group>> open_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // batches executing
};

namespace batcher_internal {
// The rows of `v` (the leading dim shared by all of its inputs) and its batch
// key; rows = -1 when its inputs' leading dims differ.
int64_t BatchRows(const ValidatedRequest& v, std::string* key);
// `requests` concatenated along dim 0 (all have the same key).
InferRequest Concatenate(const std::vector<const InferRequest*>& requests,
                         absl::Duration timeout);
// The part of `batch`'s outputs of the rows [row, row + rows) of `total`.
// \error kInternal when an output's leading dim is not `total`.
absl::StatusOr<InferResponse> SplitRows(const InferResponse& batch, int64_t row, int64_t rows,
                                        int64_t total);
}  // namespace batcher_internal

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_BATCHER_H_
