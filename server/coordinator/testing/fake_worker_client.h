// An in-memory WorkerClient for tests of the coordinator core. It keeps the
// programs it is given (common/program/program_ir.h) and runs only their
// Output steps, over the input slices of the request: each Output step whose
// buffer is an input buffer InputBuffer(name) it was sent on that device
// returns that box of it (the programs of FakeModelCompiler,
// fake_model_compiler.h, are just such steps). Other steps are ignored. It
// records its calls and injects failures (a worker down, failing Executes or
// loads, slow Executes).
//
// Thread-safety: thread-safe (one mutex).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

class FakeWorkerClient : public WorkerClient {
 public:
  explicit FakeWorkerClient(int64_t worker_id) : worker_id_(worker_id) {}

  absl::StatusOr<int64_t> LoadModel(const LoadModelIr& call,
                                    absl::Duration timeout) override;
  absl::Status UnloadModel(const std::string& model, int64_t generation,
                           absl::Duration timeout) override;
  absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) override;
  absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                        absl::Duration timeout) override;
  absl::Status Cancel(const std::string& request_id, const std::string& reason,
                      absl::Duration timeout) override;
  absl::StatusOr<WorkerStatusIr> Status(absl::Duration timeout) override;

  // Failure injection: `down` makes every call UNAVAILABLE (a dead process);
  // FailExecute makes the next `times` Executes (every one when negative)
  // return `status` (OK clears it).
  void SetDown(bool down);
  void FailExecute(absl::Status status, int times = -1);
  void SetExecuteDelay(absl::Duration delay);
  // LoadModel of `model` fails with `status` (e.g. a corrupt checkpoint).
  void FailLoad(const std::string& model, absl::Status status);

  int execute_calls() const;
  int install_calls() const;
  std::vector<std::string> cancelled() const;
  // (model, generation) pairs loaded now; devices of each.
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> loaded() const;
  std::vector<std::pair<std::string, int64_t>> unloaded() const;
  int64_t max_concurrent_executes() const;

 private:
  absl::Status CheckUp() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t worker_id_;
  mutable absl::Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status execute_failure_ ABSL_GUARDED_BY(mu_);
  int execute_failures_left_ ABSL_GUARDED_BY(mu_) = -1;  // negative: no limit
  absl::Duration execute_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, absl::Status> load_failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> loaded_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, int64_t>> unloaded_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ProgramIr> programs_ ABSL_GUARDED_BY(mu_);  // by program_id
  std::vector<std::string> cancelled_ ABSL_GUARDED_BY(mu_);
  int execute_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int install_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
