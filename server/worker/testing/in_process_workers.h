// N WorkerEngines in one process, connected by an InMemoryTransport: an
// in-process cluster for tests (the compiler's tests run compiled programs on
// it), over the program IR (common/program/program_ir.h) only. Worker ids are
// 0..N-1.
//
//   InProcessWorkers cluster(4);
//   MS_RETURN_IF_ERROR(cluster.LoadModel(load).status());  // devices per worker
//   MS_RETURN_IF_ERROR(cluster.InstallPrograms(programs));  // by ProgramIr::worker
//   MS_ASSIGN_OR_RETURN(auto outputs, cluster.Execute("prog", "r1", inputs_by_worker));
//
// Thread-safety: thread-safe (Execute may be called concurrently for
// different request ids).
#ifndef MESHSERVE_SERVER_WORKER_TESTING_IN_PROCESS_WORKERS_H_
#define MESHSERVE_SERVER_WORKER_TESTING_IN_PROCESS_WORKERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/program/program_ir.h"
#include "server/worker/testing/in_memory_transport.h"
#include "server/worker/worker_engine.h"

namespace meshserve {

class InProcessWorkers {
 public:
  struct Options {
    WorkerEngine::Options worker;  // worker_id is set per worker
    int64_t chunk_bytes = 0;       // see InMemoryTransport
  };

  explicit InProcessWorkers(int num_workers) : InProcessWorkers(num_workers, Options()) {}
  InProcessWorkers(int num_workers, Options options);
  ~InProcessWorkers();

  int num_workers() const { return static_cast<int>(workers_.size()); }
  // Precondition (CHECK): 0 <= id < num_workers().
  WorkerEngine& worker(int64_t id);
  InMemoryTransport& transport() { return *transport_; }

  // Loads `request` on every worker that hosts a device in
  // request.device_workers, with `devices` set to that worker's devices
  // (request.devices is ignored). Returns the total param bytes.
  // \error kInvalidArgument for a worker id outside [0, num_workers); the
  //   first worker's LoadModel error otherwise.
  absl::StatusOr<int64_t> LoadModel(const LoadModelIr& request);

  // Installs each program on worker program.worker.
  // (A std::vector<ProgramIr> or a braced list converts to the span.)
  absl::Status InstallPrograms(absl::Span<const ProgramIr> programs);

  // Runs request `request_id` of program `program_id` on every worker of
  // `inputs` (worker id -> its input slices; a worker absent from the map is
  // not run) at once, each on a thread of the shared ElasticExecutor, with
  // `timeout` (<= 0: the workers' default deadline). Returns every worker's
  // output slices by worker id, or the first failure by worker id after all
  // have finished; a failure on one worker cancels the request on the others
  // (as the coordinator does).
  absl::StatusOr<std::map<int64_t, std::vector<SliceIr>>> Execute(
      absl::string_view program_id, absl::string_view request_id,
      std::map<int64_t, std::vector<SliceIr>> inputs,
      absl::Duration timeout = absl::ZeroDuration());

 private:
  std::unique_ptr<InMemoryTransport> transport_;
  std::vector<std::unique_ptr<WorkerEngine>> workers_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_TESTING_IN_PROCESS_WORKERS_H_
