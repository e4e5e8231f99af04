// The worker's end of WorkerService.ExecuteStream: Execute for small
// requests over one long-lived stream from the coordinator, so that a
// request costs a message each way instead of a call (no stream set-up, no
// headers or trailers per request).
//
// Each request read is handed to ExecuteMessage (below: WorkerEngine::
// ExecuteAsync over the wire messages) at once and the
// next read starts, so the requests of one stream run concurrently; each
// reply (ExecuteStreamReply: the request's id, its status, its outputs) is
// written when its request finishes, one write at a time, in finishing
// order. The reactor finishes (and is deleted) only after the coordinator
// ended or broke the stream and every request it read has finished: a
// request's completion never outlives the reactor. Replies that cannot be
// written (the stream broke) are dropped; the coordinator fails the requests
// it was waiting for when its end of the stream ends.
//
// Thread-safety: gRPC's reactor rules; the completions of ExecuteAsync may
// run on any thread, the queue of replies has its own mutex.
#ifndef MESHSERVE_SERVER_WORKER_GRPC_EXECUTE_STREAM_H_
#define MESHSERVE_SERVER_WORKER_GRPC_EXECUTE_STREAM_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/write_queue.h"
#include "grpcpp/support/server_callback.h"
#include "proto/worker_service.pb.h"
#include "server/worker/worker_engine.h"

namespace meshserve {

// Execute over the wire messages, for the Execute and ExecuteStream handlers:
// moves the input bytes out of `*request` into the IR
// (common/program/program_proto.h), runs WorkerEngine::ExecuteAsync (which
// holds no thread while a receive waits), fills `*response` with the output
// slices and calls `done` once; both messages must live until then.
// `call_deadline` is the gRPC call's own deadline (Execute; InfiniteFuture
// for none, as for a request of ExecuteStream): the run's deadline is the
// earliest of it, arrival + deadline_ms and deadline_unix_us (RequestTimeout).
void ExecuteMessage(WorkerEngine* engine, ExecuteRequest* request, ExecuteResponse* response,
                    std::function<void(absl::Status)> done,
                    absl::Time call_deadline = absl::InfiniteFuture());

// The time a request arriving at `now` may run: the earliest of now +
// deadline_ms (when > 0), deadline_unix_us (when > 0) and `call_deadline`,
// minus now; ZeroDuration when none is set (the runner's default applies).
// \error kDeadlineExceeded naming the request and how late it arrived when
//   the earliest has passed (it is not run).
absl::StatusOr<absl::Duration> RequestTimeout(const ExecuteRequest& request, absl::Time now,
                                              absl::Time call_deadline);

class ExecuteStreamReactor final
    : public grpc::ServerBidiReactor<ExecuteRequest, ExecuteStreamReply> {
 public:
  // `record(start, status)` counts each request (worker_service.cc's metrics).
  using Recorder = std::function<void(absl::Time start, const absl::Status& status)>;
  ExecuteStreamReactor(WorkerEngine* worker, Recorder record);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // A request's reply is ready: queue it (and write it when no write is out).
  void Enqueue(std::shared_ptr<ExecuteStreamReply> reply) ABSL_LOCKS_EXCLUDED(mu_);
  // True once (the caller then calls Finish, after unlocking, and touches
  // nothing of *this after it): reads ended, no request runs, no write is out.
  bool FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkerEngine* const worker_;
  const Recorder record_;
  std::unique_ptr<ExecuteRequest> reading_;  // the message the read in progress fills

  absl::Mutex mu_;
  WriteQueue<std::shared_ptr<ExecuteStreamReply>> replies_ ABSL_GUARDED_BY(mu_);
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;       // a write failed: drop the rest
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;           // requests read and not yet replied
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_GRPC_EXECUTE_STREAM_H_
