// N ShardWorkers in one process, connected by an InMemoryTransport: an
// in-process cluster for tests (the compiler's tests run compiled programs on
// it). Worker ids are 0..N-1.
//
//   InProcessWorkers cluster(4);
//   MS_RETURN_IF_ERROR(cluster.LoadModel(load_request));   // devices per worker
//   MS_RETURN_IF_ERROR(cluster.InstallPrograms(programs));  // by Program.worker
//   MS_ASSIGN_OR_RETURN(auto responses, cluster.Execute(requests_by_worker));
//
// The messages are forward-declared: include "proto/worker_service.pb.h" to
// build them.
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
#include "absl/types/span.h"
#include "server/worker/testing/in_memory_transport.h"
#include "server/worker/shard_worker.h"

namespace meshserve {

class InProcessWorkers {
 public:
  struct Options {
    ShardWorker::Options worker;  // worker_id is set per worker
    int64_t chunk_bytes = 0;      // see InMemoryTransport
  };

  explicit InProcessWorkers(int num_workers) : InProcessWorkers(num_workers, Options()) {}
  InProcessWorkers(int num_workers, Options options);
  ~InProcessWorkers();

  int num_workers() const { return static_cast<int>(workers_.size()); }
  // Precondition (CHECK): 0 <= id < num_workers().
  ShardWorker& worker(int64_t id);
  InMemoryTransport& transport() { return *transport_; }

  // Sends `request` to every worker that hosts a device in
  // request.device_workers(), with `devices` set to that worker's devices
  // (request.devices() is ignored). Returns the total param bytes.
  // \error kInvalidArgument for a worker id outside [0, num_workers); the
  //   first worker's LoadModel error otherwise.
  absl::StatusOr<int64_t> LoadModel(const LoadModelRequest& request);

  // Installs each program on worker program.worker().
  // (A std::vector<Program> or a braced list converts to the span.)
  absl::Status InstallPrograms(absl::Span<const Program> programs);

  // Runs Execute on the given workers at once (each on a thread of the shared
  // ElasticExecutor; workers absent from the map are not run). Returns every
  // response by worker id, or the first failure by worker id after all have
  // finished; a failure on one worker cancels the request on the others (as
  // the coordinator does).
  absl::StatusOr<std::map<int64_t, ExecuteResponse>> Execute(
      std::map<int64_t, ExecuteRequest> requests);

 private:
  std::unique_ptr<InMemoryTransport> transport_;
  std::vector<std::unique_ptr<ShardWorker>> workers_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_TESTING_IN_PROCESS_WORKERS_H_
