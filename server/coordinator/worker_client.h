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
#include "common/program/decode_step.h"
#include "common/program/program_ir.h"

namespace meshserve {

struct ExecuteCall {
  std::string program_id;
  std::string request_id;
  std::vector<SliceIr> inputs;
  int64_t deadline_ms = 0;
  int64_t param_version = 0;  // 0: the newest resident version of the generation
  ParamCacheMode param_cache = ParamCacheMode::kOff;  // the same for every worker of a request
  // Inputs and outputs small enough for a long-lived stream shared by many
  // calls (GrpcWorkerClient: WorkerService.ExecuteStream) rather than a call
  // of its own.
  bool small = false;
  // A generation step (common/program/decode_step.h): the same for every
  // worker of the step; null otherwise.
  std::shared_ptr<const DecodeStepIr> decode;
};

struct ExecuteResult {
  std::vector<SliceIr> outputs;
};

// A StageParams stream to one worker (WorkerClient::StageParams): Write each
// chunk in order, then Finish once (returns the bytes the worker staged). A
// failed Write ends the stream; Finish then returns the cause. Not
// thread-safe: one writer per stream, except Cancel, which any thread may
// call to make a blocked Write return.
class StageParamsWriter {
 public:
  virtual ~StageParamsWriter() = default;
  // Moves the chunk's data.
  virtual absl::Status Write(StageChunkIr chunk) = 0;
  virtual absl::StatusOr<int64_t> Finish() = 0;
  virtual void Cancel() {}
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Param bytes now resident, and the bytes of call.sources read from peers
  // and copied locally.
  virtual absl::StatusOr<LoadModelResultIr> LoadModel(const LoadModelIr& call,
                                                      absl::Duration timeout) = 0;
  // generation -1: every generation; version 0: every version of it.
  virtual absl::Status UnloadModel(const std::string& model, int64_t generation,
                                   int64_t version, absl::Duration timeout) = 0;
  // The bytes (row-major, the param's dtype) of call.box, which lies inside
  // one held box of the resident version (or its push staging).
  virtual absl::StatusOr<std::string> ReadParam(const ReadParamIr& call,
                                                absl::Duration timeout) = 0;
  // Opens a StageParams stream (the deadline covers the whole stream).
  virtual absl::StatusOr<std::unique_ptr<StageParamsWriter>> StageParams(
      absl::Duration timeout) = 0;
  virtual absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& call,
                                                      absl::Duration timeout) = 0;
  virtual absl::Status AbortParams(const std::string& model, int64_t generation,
                                   int64_t version, absl::Duration timeout) = 0;
  // This worker's part of a compiled plan (program.worker is its id).
  virtual absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) = 0;
  // Drops an installed program (the program cache evicted it). \error
  // kNotFound naming it when the worker does not have it. The default:
  // kUnimplemented (the program stays until its generation unloads).
  virtual absl::Status UninstallProgram(const std::string& /*program_id*/,
                                        absl::Duration /*timeout*/) {
    return absl::UnimplementedError("UninstallProgram: not supported by this worker client");
  }
  // Frees the KV caches of generation sequences `seqs` in every cache of
  // (model, generation) on the worker (WorkerService.ReleaseSequences; an
  // unknown sequence is skipped): a generation step whose sequences only end
  // runs no program. The default: kUnimplemented (the caller then frees them
  // with a step of its own).
  virtual absl::Status ReleaseSequences(const std::string& /*model*/, int64_t /*generation*/,
                                        const std::vector<int64_t>& /*seqs*/,
                                        absl::Duration /*timeout*/) {
    return absl::UnimplementedError("ReleaseSequences: not supported by this worker client");
  }
  // By value: the input slices' bytes move into the RPC, not copied again.
  virtual absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                                absl::Duration timeout) = 0;
  using ExecuteDone = std::function<void(absl::StatusOr<ExecuteResult>)>;
  // Starts Execute and returns at once; `done` runs exactly once with what
  // Execute would return, on any thread (it must not block). The default
  // runs Execute on the shared ElasticExecutor (fan_out.cc); GrpcWorkerClient
  // uses gRPC's callback API (no thread per call).
  virtual void ExecuteAsync(ExecuteCall call, absl::Duration timeout, ExecuteDone done);
  virtual absl::Status Cancel(const std::string& request_id,
                              const std::string& reason,
                              absl::Duration timeout) = 0;
  virtual absl::StatusOr<WorkerStatusIr> Status(absl::Duration timeout) = 0;
  // True once when the connection to the worker, seen up by an earlier call,
  // is down now (the process died or closed it): the coordinator then probes
  // the worker at once instead of waiting for its heartbeats to stop. Cheap;
  // never blocks or connects. The default never reports a drop.
  virtual bool ConnectionDropped() { return false; }
};

// Makes (or reuses) the client for a worker id at `address`.
using WorkerClientFactory = std::function<absl::StatusOr<std::shared_ptr<WorkerClient>>(
    int64_t worker_id, const std::string& address)>;

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_
