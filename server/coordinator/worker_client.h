// How the coordinator talks to a worker: an abstract WorkerClient over the
// calls of proto/worker_service.proto, implemented by
// GrpcWorkerClient (grpc/grpc_worker_client.h) and by FakeWorkerClient
// (testing/fake_worker_client.h).
//
// The messages are the program IR shared with the compiler and the worker
// (common/program/program_ir.h: ProgramIr, LoadModelIr, SliceIr,
// WorkerStatusIr), so this header and the transport-free core (ms_coordinator)
// include no .pb.h or gRPC header and link no protobuf. Only
// grpc_worker_client.cc sees the generated classes and serializes (through
// common/program/program_proto.h).
//
// Every call takes a timeout (<= 0: none). Implementations return
// kUnavailable when the worker cannot be reached and kDeadlineExceeded when
// the timeout expires; other codes come from the worker.
//
// Thread-safety: implementations must be thread-safe (many requests call
// Execute at once).
#ifndef MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/program/program_ir.h"

namespace meshserve {

struct ExecuteCall {
  std::string program_id;
  std::string request_id;
  std::vector<SliceIr> inputs;
  int64_t deadline_ms = 0;
};

struct ExecuteResult {
  std::vector<SliceIr> outputs;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Returns the param bytes now resident.
  virtual absl::StatusOr<int64_t> LoadModel(const LoadModelIr& call,
                                            absl::Duration timeout) = 0;
  // generation -1: every generation.
  virtual absl::Status UnloadModel(const std::string& model, int64_t generation,
                                   absl::Duration timeout) = 0;
  // This worker's part of a compiled plan (program.worker is its id).
  virtual absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) = 0;
  // By value: the input slices' bytes move into the RPC, not copied again.
  virtual absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                                absl::Duration timeout) = 0;
  virtual absl::Status Cancel(const std::string& request_id,
                              const std::string& reason,
                              absl::Duration timeout) = 0;
  virtual absl::StatusOr<WorkerStatusIr> Status(absl::Duration timeout) = 0;
};

// Makes (or reuses) the client for a worker id at `address`.
using WorkerClientFactory = std::function<absl::StatusOr<std::shared_ptr<WorkerClient>>(
    int64_t worker_id, const std::string& address)>;

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_
