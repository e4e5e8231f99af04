// The receive side of the worker data plane: a rendezvous keyed by
// (request id, tag).
//
// A peer's slice arrives as one or more chunks (DataChunk: total_bytes, offset,
// data). The first chunk allocates the slice's buffer of total_bytes; every
// chunk is copied once, in place, at its offset. Chunks of one slice must
// arrive in order (one gRPC stream per slice keeps them in order), so a slice is
// complete when the bytes received reach total_bytes. A RecvStep calls
// `TryReceive`, which takes the bytes out of a complete slice or else leaves a
// `Ready` callback that the thread completing (or poisoning, or cancelling)
// the slice calls once, outside the lock; the step then tries again. Nothing
// here waits, so a request's run never holds a thread while a peer is
// behind. `Receive` is the blocking form (until a deadline).
//
// Slices may arrive before the request starts on this worker (a peer ran
// ahead); they are kept until the request starts and consumes them, or dropped
// by `FinishRequest`, or garbage-collected after `orphan_ttl` when the request
// never starts here. Chunks for a request that already finished or was
// cancelled are dropped (OK is returned: the sender did nothing wrong).
//
// Errors (never a crash; each names the request, tag and values):
//   total_bytes < 0 or > max_slice_bytes, offset != bytes received so far
//   (out-of-order, duplicated or overlapping chunk), offset + size >
//   total_bytes, total_bytes different from an earlier chunk's, a second slice
//   under a tag already complete -> kInvalidArgument. The bad entry is poisoned:
//   a Receive on it fails at once with the same error instead of timing out.
//   A new slice whose buffer would take the bytes held over
//   max_inflight_slice_bytes -> kResourceExhausted naming the request, the tag,
//   the bytes asked, the bytes in use and the flag; the entry is poisoned the
//   same way (its Receive fails at once) and stays until the request ends, so
//   that later chunks of that slice are refused too.
//   Receive past the deadline -> kDeadlineExceeded; on a cancelled request ->
//   the cancel status (kAborted naming the reason).
//
// Memory budget. Every slice buffer held here (complete or partial, of a
// request running here or not started yet) counts from its first chunk until
// Receive takes it out, or the request finishes, is cancelled or is collected
// as an orphan, or the slice is poisoned. The total never exceeds
// Options::max_inflight_slice_bytes (worker flag --max_inflight_slice_bytes):
// a slice that does not fit is refused, never waited for (waiting could
// deadlock requests that hold budget while they wait for each other). A slice
// larger than the budget can never be received.
//
// Thread-safety: all methods are thread-safe (one absl::Mutex); Receive blocks
// only its caller; Ready callbacks run with no lock held.
#ifndef MESHSERVE_SERVER_WORKER_RENDEZVOUS_H_
#define MESHSERVE_SERVER_WORKER_RENDEZVOUS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"

namespace meshserve {

class Rendezvous {
 public:
  struct Options {
    int64_t max_slice_bytes = int64_t{16} << 30;
    // Bytes of all slice buffers held at once (see "Memory budget").
    int64_t max_inflight_slice_bytes = int64_t{4} << 30;
    // Slices of requests that never start here are dropped after this long.
    absl::Duration orphan_ttl = absl::Minutes(5);
    // How many finished/cancelled request ids are remembered (to drop late
    // chunks and to fail an Execute that arrives after its Cancel).
    int64_t max_remembered_requests = 65536;
  };

  Rendezvous() : Rendezvous(Options()) {}
  explicit Rendezvous(Options options) : options_(options) {}
  // \error kInvalidArgument naming the field and its value: a size < 1.
  static absl::Status ValidateOptions(const Options& options);
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Adds one chunk of the slice (request_id, tag). See the file comment.
  // `dtype` is the sender's element type (nullopt: not given), passed through
  // to Receive.
  absl::Status DeliverChunk(absl::string_view request_id, absl::string_view tag,
                            int64_t total_bytes, int64_t offset,
                            absl::string_view data, int64_t src_worker,
                            std::optional<DType> dtype = std::nullopt);
  // A whole slice at once (no copy: the string is moved in).
  absl::Status DeliverSlice(absl::string_view request_id, absl::string_view tag,
                            std::string bytes, int64_t src_worker,
                            std::optional<DType> dtype = std::nullopt);

  struct Received {
    std::string bytes;
    std::optional<DType> dtype;  // as delivered
  };

  // Marks the request as running here.
  // \error the cancel status when the request was cancelled before it started;
  //   kAlreadyExists when it is already running or finished recently.
  absl::Status StartRequest(absl::string_view request_id);

  // Waits until the slice under `tag` is complete and returns its bytes
  // (removing the entry). `src_worker` is only used in messages.
  absl::StatusOr<Received> Receive(absl::string_view request_id,
                                   absl::string_view tag, int64_t src_worker,
                                   absl::Time deadline);

  // Called once when the slice a TryReceive waits for completes or fails.
  using Ready = std::function<void()>;
  // The slice's bytes when it is complete (removing the entry); its error
  // when it is poisoned or the request was cancelled or finished; past
  // `deadline`, kDeadlineExceeded naming the tag, the worker and the bytes
  // received so far. Otherwise registers make_ready() (called only then; one
  // waiter per request: a run waits on one receive at a time) and returns
  // nullopt; call again once it ran. \error kFailedPrecondition for a second
  // waiter.
  absl::StatusOr<std::optional<Received>> TryReceive(absl::string_view request_id,
                                                     absl::string_view tag,
                                                     int64_t src_worker, absl::Time deadline,
                                                     absl::FunctionRef<Ready()> make_ready);
  // Removes the request's waiter, if any (its deadline passed): true when it
  // was there, so its callback never runs and the caller resumes the run (the
  // next TryReceive reports the deadline); false when its slice came first.
  bool RemoveWaiter(absl::string_view request_id);
  // Fails every request's pending receives with `error` (shutdown).
  void FailAll(absl::Status error);

  // Fails the request's pending and future receives with kAborted naming
  // `reason`; drops its slices. Works before, during and after the request.
  void Cancel(absl::string_view request_id, absl::string_view reason);
  // As Cancel, failing them with `error` itself (not OK): a chunk delivered
  // on a shared peer stream that the rendezvous rejected.
  void Fail(absl::string_view request_id, absl::Status error);

  // Drops the request's remaining slices; later chunks for it are dropped.
  void FinishRequest(absl::string_view request_id);

  // Number of slices held (complete or partial), for tests and status.
  int64_t NumPendingSlices() const;
  // Bytes of the slice buffers held (counted against max_inflight_slice_bytes).
  int64_t InflightSliceBytes() const;

 private:
  struct Slice {
    std::string bytes;
    int64_t total_bytes = 0;
    int64_t received = 0;
    int64_t src_worker = -1;
    std::optional<DType> dtype;
    int64_t charged = 0;  // bytes counted in inflight_bytes_ for this buffer
    absl::Status error;  // poisoned by a bad chunk
    bool refused = false;  // poisoned by the budget: kept until the request ends
    bool complete() const { return error.ok() && received == total_bytes; }
  };
  struct Waiter {
    std::string tag;
    int64_t src_worker = -1;
    Ready ready;
  };
  struct RequestSlices {
    absl::flat_hash_map<std::string, Slice> slices;
    absl::Time created;
    bool running = false;
    std::optional<Waiter> waiter;  // a TryReceive waiting on waiter->tag
  };

  void RememberLocked(const std::string& request_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectOrphansLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request's slices, created if needed; nullptr when the request is
  // finished or cancelled (chunks for it are dropped).
  RequestSlices* FindOrCreateLocked(absl::string_view request_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `bytes` for a new slice buffer, or returns the refusal.
  absl::Status ChargeLocked(absl::string_view request_id, absl::string_view tag,
                            int64_t src_worker, int64_t bytes, Slice* slice)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnchargeLocked(Slice* slice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases the request's entry, releasing what its slices held; its waiter's
  // callback goes to `wake` (run it after unlocking).
  void EraseRequestLocked(const std::string& request_id, std::vector<Ready>* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the request's waiter to `wake` if it waits on `tag` and that slice
  // is complete or poisoned.
  void WakeLocked(absl::string_view request_id, absl::string_view tag,
                  std::vector<Ready>* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kInvalidArgument for a total_bytes outside [0, max_slice_bytes].
  absl::Status CheckTotal(absl::string_view request_id, absl::string_view tag,
                          int64_t src_worker, int64_t total_bytes) const;
  // Runs `deliver` (a *Locked delivery) under the lock, then the waiter it
  // completed, if any.
  template <typename Locked>
  absl::Status DeliverAndWake(absl::string_view request_id, absl::string_view tag,
                              Locked deliver);
  absl::Status DeliverChunkLocked(absl::string_view request_id, absl::string_view tag,
                                  int64_t total_bytes, int64_t offset,
                                  absl::string_view data, int64_t src_worker,
                                  std::optional<DType> dtype)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeliverSliceLocked(absl::string_view request_id, absl::string_view tag,
                                  std::string bytes, int64_t src_worker,
                                  std::optional<DType> dtype)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The DeadlineExceeded status of a receive of `tag` that found no complete
  // slice.
  absl::Status DeadlineErrorLocked(absl::string_view request_id, absl::string_view tag,
                                   int64_t src_worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, RequestSlices> requests_ ABSL_GUARDED_BY(mu_);
  // Finished requests (value ok) and cancelled ones (value = cancel status).
  absl::flat_hash_map<std::string, absl::Status> done_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> done_order_ ABSL_GUARDED_BY(mu_);
  absl::Time last_collect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of every Slice::charged
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_RENDEZVOUS_H_
