// GenerateServiceImpl (generate_service.h): one ServerWriteReactor per call.
//
// The reactor's state lives in a Stream shared with the sequence's sink: the
// sink may be called (from the generation loop's thread) before the handler
// returns and after the call has ended, so it never holds the reactor itself.
// Under Stream::mu the callers decide what to do -- start a write, finish the
// call -- and do it outside the lock:
//   - one write out at a time (WriteQueue); the call is finished only with no
//     write out, exactly once (`finished`), and nobody touches the reactor
//     after that (OnDone deletes it);
//   - the end of the call is `pending` until the writes before it are done.
#include "server/coordinator/grpc/generate_service.h"

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_util.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/write_queue.h"
#include "server/coordinator/grpc/generate_call.h"
#include "server/coordinator/grpc/generate_proto.h"

namespace meshserve {
namespace {

using ChunkWriter = grpc::ServerWriteReactor<GenerateChunk>;

// A call refused before it started.
class RefusedCall final : public ChunkWriter {
 public:
  explicit RefusedCall(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

class Stream {
 public:
  Stream(ChunkWriter* reactor, CallGate::Pass pass) : reactor_(reactor), pass_(std::move(pass)) {}

  // The sequence's sink (the generation loop's thread).
  void OnEvent(const SequenceEvent& event, const std::string& text) ABSL_LOCKS_EXCLUDED(mu_) {
    std::unique_ptr<GenerateChunk> chunk;
    const bool last_ok = event.finish == FinishReason::kStop ||
                         event.finish == FinishReason::kLength;
    if (event.finish == FinishReason::kNone || last_ok || !event.token_ids.empty()) {
      chunk = std::make_unique<GenerateChunk>();
      SequenceEventToProto(event, chunk.get());
      chunk->set_text(text);
    }
    Actions act;
    {
      absl::MutexLock lock(&mu_);
      if (event.finish != FinishReason::kNone) ended_ = true;
      if (pending_.has_value()) return;  // the call is ending: nothing more goes out
      if (chunk != nullptr) act.write = writes_.Push(std::move(chunk));
      if (last_ok) {
        pending_ = grpc::Status::OK;
      } else if (event.finish == FinishReason::kError) {
        pending_ = ToGrpcStatus(event.status.ok() ? absl::InternalError("generation failed")
                                                  : event.status);
      } else if (event.finish == FinishReason::kCancelled) {
        pending_ = grpc::Status(grpc::StatusCode::CANCELLED,
                                "the sequence was cancelled by the server");
      }
      TakeFinishLocked(act);
    }
    Run(act);
  }

  // The sequence started: `cancel` ends it.
  void Started(std::function<void()> cancel) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancel_ = std::move(cancel);
  }

  // The sequence did not start (or the call must end now): ends the call.
  void End(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    Actions act;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      if (!pending_.has_value()) pending_ = std::move(status);
      TakeFinishLocked(act);
    }
    Run(act);
  }

  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    Actions act;
    {
      absl::MutexLock lock(&mu_);
      act.write = writes_.Done(ok);
      if (!ok) Abandon(act, "a write to the client failed");
      TakeFinishLocked(act);
    }
    Run(act);
  }

  void OnCancel() ABSL_LOCKS_EXCLUDED(mu_) {
    Actions act;
    {
      absl::MutexLock lock(&mu_);
      writes_.Clear();
      Abandon(act, "the client cancelled the call");
      TakeFinishLocked(act);
    }
    Run(act);
  }

  // The call is over: a sequence still running is cancelled.
  void OnDone() ABSL_LOCKS_EXCLUDED(mu_) {
    std::function<void()> cancel;
    {
      absl::MutexLock lock(&mu_);
      if (!ended_) cancel = cancel_;
    }
    if (cancel) cancel();
  }

 private:
  struct Actions {
    const GenerateChunk* write = nullptr;
    std::optional<grpc::Status> finish;
    std::optional<CallGate::Pass> pass;  // released just before Finish
    std::function<void()> cancel;
  };

  // The client is gone: end the call CANCELLED and cancel the sequence.
  void Abandon(Actions& act, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pending_.has_value()) pending_ = grpc::Status(grpc::StatusCode::CANCELLED, why);
    if (!ended_) act.cancel = cancel_;
  }

  // Finish when an end is pending and no write is out (once).
  void TakeFinishLocked(Actions& act) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !pending_.has_value() || writes_.writing()) return;
    finished_ = true;
    act.finish = *pending_;
    if (pass_.has_value()) act.pass.emplace(std::move(*pass_));
    pass_.reset();
  }

  // Outside mu_: a write or the finish (never both: Finish waits for writes).
  void Run(Actions& act) {
    if (act.cancel) act.cancel();
    if (act.write != nullptr) reactor_->StartWrite(act.write);
    if (act.finish.has_value()) {
      act.pass.reset();  // the server may stop once the call is finished
      reactor_->Finish(*act.finish);
    }
  }

  ChunkWriter* const reactor_;  // valid until Finish (OnDone deletes it)
  absl::Mutex mu_;
  WriteQueue<std::unique_ptr<GenerateChunk>> writes_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> pending_ ABSL_GUARDED_BY(mu_);  // how the call ends
  bool finished_ ABSL_GUARDED_BY(mu_) = false;                // Finish was called
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the sequence ended (or never started)
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
  std::optional<CallGate::Pass> pass_ ABSL_GUARDED_BY(mu_);
};

class GenerateReactor final : public ChunkWriter {
 public:
  GenerateReactor(Generator& generator, GenerateCall call, CallGate::Pass pass)
      : stream_(std::make_shared<Stream>(this, std::move(pass))) {
    std::shared_ptr<Stream> stream = stream_;
    absl::StatusOr<std::function<void()>> cancel = StartGeneration(
        generator, std::move(call),
        [stream](const SequenceEvent& e, const std::string& text) { stream->OnEvent(e, text); });
    if (cancel.ok()) {
      stream_->Started(*std::move(cancel));
    } else {
      stream_->End(ToGrpcStatus(cancel.status()));
    }
  }
  void OnWriteDone(bool ok) override { stream_->OnWriteDone(ok); }
  void OnCancel() override { stream_->OnCancel(); }
  void OnDone() override {
    stream_->OnDone();
    delete this;
  }

 private:
  const std::shared_ptr<Stream> stream_;  // shared with the sequence's sink
};

}  // namespace

grpc::ServerWriteReactor<GenerateChunk>* GenerateServiceImpl::Generate(
    grpc::CallbackServerContext* context, const meshserve::GenerateRequest* request) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return new RefusedCall(pass.status());
  if (generator_ == nullptr) {
    return new RefusedCall(FailedPrecondition("generation is not enabled on this coordinator"));
  }
  absl::StatusOr<GenerateCall> call = GenerateRequestFromProto(*request);
  if (!call.ok()) return new RefusedCall(call.status());
  return new GenerateReactor(*generator_, *std::move(call), *std::move(pass));
}

}  // namespace meshserve
