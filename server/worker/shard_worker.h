// ShardWorker: the worker's transport-free core with the wire messages of
// proto/worker_service.proto and proto/program.proto as its API (the gRPC
// service in worker_service.h is a thin shim over it). The work is done by
// WorkerEngine (worker_engine.h) over the program IR shared with the
// coordinator (common/program/program_ir.h); common/program/program_proto.h
// converts.
//
// This header forward-declares the messages: include "proto/worker_service.pb.h"
// to call it.
//
// Param versions: ExecuteRequest.param_version picks the resident version
// (0: the newest); UnloadModelRequest.version 0 unloads every version.
//
// Program semantics (program.proto). A worker runs its step list in order.
// Buffers are per (request, device, name): "param/<name>" is the resident
// param box of the program's (model, generation) on that device (read-only),
// "in/<name>" the request's input slice for that device, anything else a
// temporary of the request. All boxes are in global coordinates.
//   compute  runs a kernel on local buffers (common/program/compute_step.h)
//            and creates/replaces the output buffer with out_box/out_dtype.
//   send     extracts `box` of the buffer and hands it to the PeerTransport for
//            (dst_worker, tag); it never blocks. dst_worker == this worker
//            (Program.worker) delivers locally without the network.
//   recv     waits (until the request's deadline) for the slice under `tag`
//            and writes it into `box` of the buffer, created zero-filled with
//            buffer_box/dtype when absent; accumulate adds (float32) instead.
//            The bytes arrive in the sender's dtype (DataChunk.dtype) and are
//            converted when the buffer has another one.
//   copy     copies (or accumulates) `box` from (src_device, src) into
//            (dst_device, dst), creating dst with dst_box/dtype when absent;
//            converts when the dtypes differ.
//   free     drops a temporary buffer (a no-op when the device has none).
//   output   returns `box` of the buffer as output slice `output`.
// Before Execute returns it waits for its sends to be delivered. A receive
// that waits for a peer holds no thread (ExecuteAsync).
//
// Errors (every bad program, request or peer message returns a Status that
// names the value; the worker never crashes on them):
//   unknown program                          kNotFound
//   model generation not loaded here         kFailedPrecondition
//   unknown buffer / param                   kNotFound
//   box outside the buffer                   kOutOfRange
//   byte length or dtype mismatch, bad box, device not hosted, unknown op,
//   kernel shape errors, writes to "param/"  kInvalidArgument
//   receive past the deadline                kDeadlineExceeded
//   request cancelled (Cancel, or one of its sends failed)
//                                            kAborted / the send's error
//   send to an unreachable peer              kUnavailable naming the worker
// Error messages carry "worker W program 'P' request 'R': step I (kind ...)".
//
// Thread-safety: thread-safe; concurrent requests (different request ids) run
// concurrently.
#ifndef MESHSERVE_SERVER_WORKER_SHARD_WORKER_H_
#define MESHSERVE_SERVER_WORKER_SHARD_WORKER_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/worker/peer_transport.h"
#include "server/worker/worker_engine.h"

namespace meshserve {

class LoadModelRequest;
class LoadModelResponse;
class UnloadModelRequest;
class Program;
class ExecuteRequest;
class ExecuteResponse;
class DataChunk;
class CancelRequest;
class WorkerStatusResponse;
class ReadParamRequest;
class StageParamChunk;
class CommitParamsRequest;
class CommitParamsResponse;
class AbortParamsRequest;

class ShardWorker {
 public:
  using Options = WorkerEngine::Options;

  // `transport` as for WorkerEngine (not owned; may be null).
  ShardWorker(Options options, PeerTransport* transport)
      : engine_(std::move(options), transport) {}

  absl::Status LoadModel(const LoadModelRequest& request, LoadModelResponse* response);
  absl::Status UnloadModel(const UnloadModelRequest& request);
  absl::Status InstallProgram(const Program& program);
  // Moves the input bytes out of `*request`.
  absl::Status Execute(ExecuteRequest* request, ExecuteResponse* response);
  // Execute without holding the thread while a receive waits
  // (WorkerEngine::ExecuteAsync): fills `*response` and calls `done` once;
  // both messages must live until then.
  void ExecuteAsync(ExecuteRequest* request, ExecuteResponse* response,
                    std::function<void(absl::Status)> done);
  // One chunk of a peer's slice (WorkerService.PushData).
  absl::Status PushChunk(const DataChunk& chunk);
  void Cancel(const CancelRequest& request);
  // Fails `request_id`'s receives here with `error` (a rejected chunk of a
  // shared PeerStream, which has no stream of its own to fail).
  void FailRequest(const std::string& request_id, absl::Status error) {
    engine_.Fail(request_id, std::move(error));
  }
  // Params as state (WorkerEngine::ReadParam / StageParams / CommitParams /
  // AbortParams). StageChunk moves the chunk's data out and returns its bytes;
  // with `data` non-empty, that is the chunk's data (views the caller keeps
  // alive for the call) and the chunk's own data field is not used.
  absl::StatusOr<ParamBytes> ReadParam(const ReadParamRequest& request) const;
  absl::StatusOr<int64_t> StageChunk(StageParamChunk* chunk, int64_t stream_epoch = -1,
                                     std::vector<absl::string_view> data = {});
  int64_t StagingEpoch() const { return engine_.StagingEpoch(); }
  absl::Status CommitParams(const CommitParamsRequest& request, CommitParamsResponse* response);
  absl::Status AbortParams(const AbortParamsRequest& request);
  // Fills everything but `address` (which the service knows).
  void GetStatus(WorkerStatusResponse* response) const;

  WorkerEngine& engine() { return engine_; }
  const WorkerEngine& engine() const { return engine_; }

 private:
  WorkerEngine engine_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_SHARD_WORKER_H_
