// In-memory stand-ins for tests of the coordinator core: FakeModelCompiler
// "compiles" every model as the identity of its input (each output is traced
// back through its layers' first inputs to a model input; its type is the
// input's, or the requested out_sharding), and FakeWorkerClient runs those
// programs by returning boxes of the input slices it was sent. Together they
// exercise the coordinator's real slicing, parallel execution, assembly,
// generations and failure handling without a compiler or worker.
//
// Fake programs are text (one line per output piece):
//   model <name> <generation> <program id>
//   output <output> <device> <input> <box>
//
// Thread-safety: thread-safe (one mutex per fake).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/compiler/model_compiler.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

class FakeModelCompiler : public ModelCompiler {
 public:
  // Models whose name is in `reject` fail ValidateModel (as JAX would).
  explicit FakeModelCompiler(std::set<std::string> reject = {})
      : reject_(std::move(reject)) {}
  absl::Status ValidateModel(const ModelFile& model) override;
  absl::StatusOr<CompiledPlan> Compile(const CompileRequest& request) override;
  absl::StatusOr<DescribeResult> Describe(const ModelFile& model,
                                          const DeviceAssignment& devices,
                                          const InputShapes& input_shapes) override;
  int compiles() const;

 private:
  const std::set<std::string> reject_;
  mutable absl::Mutex mu_;
  int compiles_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeWorkerClient : public WorkerClient {
 public:
  explicit FakeWorkerClient(int64_t worker_id) : worker_id_(worker_id) {}

  absl::StatusOr<int64_t> LoadModel(const LoadModelIr& call,
                                    absl::Duration timeout) override;
  absl::Status UnloadModel(const std::string& model, int64_t generation,
                           absl::Duration timeout) override;
  absl::Status InstallProgram(const std::string& serialized_program,
                              absl::Duration timeout) override;
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
  std::map<std::string, std::string> programs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancelled_ ABSL_GUARDED_BY(mu_);
  int execute_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int install_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_running_ ABSL_GUARDED_BY(mu_) = 0;
};

// Hands out one FakeWorkerClient per worker id (created on first use).
class FakeCluster {
 public:
  WorkerClientFactory Factory();
  std::shared_ptr<FakeWorkerClient> Worker(int64_t worker_id);

 private:
  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<FakeWorkerClient>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
