// The coordinator's end of WorkerService.ExecuteStream
// (server/worker/execute_stream.h): one long-lived stream per worker that
// carries small Execute calls as a message each way, without a call's
// set-up, headers and trailers (GrpcWorkerClient::ExecuteAsync sends calls
// with ExecuteCall::small here).
//
// Send writes the request (one write at a time, in order) and remembers its
// completion under its request id; the reply naming that id completes it
// with the worker's status and outputs. A completion runs exactly once, on
// any thread: with the reply; with kDeadlineExceeded when `timeout` passes
// first (as a unary call's deadline would); or with kUnavailable when the
// stream ends first (the worker died, restarted or stopped) -- so
// IsWorkerFailure (fan_out.h) treats a lost stream as a lost worker. An
// ended link takes no more calls (Send returns false); the client opens a
// new one.
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_EXECUTE_LINK_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_EXECUTE_LINK_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/deadline_timer.h"
#include "common/rpc/write_queue.h"
#include "grpcpp/support/client_callback.h"
#include "proto/worker_service.grpc.pb.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// Execute's outputs, their bytes moved out of *response (the unary call's
// answer and a stream reply's use it alike).
ExecuteResult TakeExecuteResult(ExecuteResponse* response);

class ExecuteLink final : public grpc::ClientBidiReactor<ExecuteRequest, ExecuteStreamReply> {
 public:
  // Opens the stream on `stub` (which must outlive the link's stream; Close
  // ends it). The link keeps itself alive until the stream has ended.
  static std::shared_ptr<ExecuteLink> Open(WorkerService::Stub* stub, std::string address);

  // Takes *request and *done and returns true, or leaves both and returns
  // false when the link has ended (or already waits for this request id).
  bool Send(std::unique_ptr<ExecuteRequest>* request, absl::Duration timeout,
            WorkerClient::ExecuteDone* done) ABSL_LOCKS_EXCLUDED(mu_);
  bool ended() const ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream; the calls waiting fail with kUnavailable.
  void Close();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  explicit ExecuteLink(std::string address) : address_(std::move(address)) {}
  // The call `request_id` gave up waiting (its timeout).
  void Expire(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);
  // True once, when the hold may go: the read ended and no write is out.
  bool ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Waiting {
    WorkerClient::ExecuteDone done;
    DeadlineTimer::Id timer = 0;
  };

  const std::string address_;
  grpc::ClientContext context_;
  ExecuteStreamReply reply_;  // the read in progress fills it

  mutable absl::Mutex mu_;
  WriteQueue<std::unique_ptr<ExecuteRequest>> writes_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;    // no more Sends (the read or a write failed)
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ExecuteLink> self_ ABSL_GUARDED_BY(mu_);  // until OnDone
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_EXECUTE_LINK_H_
