// One worker's StageParams stream of a push (param_push.h), written from a
// bounded queue on its own thread, so that the streams to all workers and the
// reading of the client's stream run at the same time.
//
// Enqueue blocks while the queue holds kQueueChunks chunks and returns the
// stream's error once a Write failed; Close drains the queue, finishes the
// stream and returns its status; destroying an unclosed sender cancels the
// stream (a Write blocked on a stuck worker returns) and joins the thread.
//
// Thread-safety: Enqueue and Close from one thread (the push's); the writer
// runs on the sender's own thread.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_STAGE_SENDER_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_STAGE_SENDER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/program/program_ir.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

class StageSender {
 public:
  static constexpr size_t kQueueChunks = 16;

  StageSender(int64_t worker, std::unique_ptr<StageParamsWriter> writer);
  ~StageSender();
  StageSender(const StageSender&) = delete;
  StageSender& operator=(const StageSender&) = delete;

  absl::Status Enqueue(StageChunkIr chunk);
  absl::Status Close();

 private:
  void Run();

  const int64_t worker_;
  std::unique_ptr<StageParamsWriter> writer_;
  absl::Mutex mu_;
  std::deque<StageChunkIr> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_STAGE_SENDER_H_
