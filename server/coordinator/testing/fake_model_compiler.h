// A stand-in for the model compiler in tests of the coordinator core:
// FakeModelCompiler "compiles" every model as the identity of its input (each
// output is traced back through its layers' first inputs to a model input; its
// type is the input's, or the requested out_sharding). Each worker's program
// (common/program/program_ir.h) is one Output step per output piece, reading
// the box of the input's buffer InputBuffer(input) on the device that holds
// it; FakeWorkerClient (fake_worker_client.h) runs exactly those steps.
// Together they exercise the coordinator's real slicing, parallel execution,
// assembly, generations and failure handling without a compiler or worker.
//
// Thread-safety: thread-safe (a mutex guards the compile count).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_MODEL_COMPILER_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_MODEL_COMPILER_H_

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/compiler/model_compiler.h"

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
  // Every plan compiled from now on says its workers keep this many bytes
  // for the param cache (CompiledPlan::kept_param_bytes; 0 by default).
  void set_kept_param_bytes(int64_t bytes);

 private:
  const std::set<std::string> reject_;
  std::atomic<int64_t> kept_param_bytes_{0};
  mutable absl::Mutex mu_;
  int compiles_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_MODEL_COMPILER_H_
