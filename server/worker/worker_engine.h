// The worker's transport-free engine, over the program IR
// (common/program/program_ir.h). The gRPC service (grpc/worker_service.h)
// converts the messages and calls it; tests of the execution semantics use
// this class directly.
//
// The engine owns two parts and wires them together, as a server core owns
// its managers:
//   - the model store (model_store.h): the resident versions of each (model,
//     generation) (loaded_model.h: the held cells of each param; devices of
//     this worker holding an identical box share one buffer, and versions
//     share the buffers of params they did not change; requests hold a
//     reference, so unloading a model while a request runs on it frees its
//     params when that request ends), the push staging (param_store.h), and
//     the param reads;
//   - the program runner (program_runner.h): installed programs (program_id
//     -> ProgramIr), their runs for requests (program_run.h), the rendezvous
//     (rendezvous.h) where peers' slices arrive, the KV caches of generation
//     steps (kv_store.h).
//
// LoadModel: parses the model JSON (common/model/model_file.h), builds the
// mesh, and for each param and hosted device computes the device's box
// (ShardBoxForDevice of the param's NamedSharding); reads it from the model's
// checkpoint with SafetensorsFile::ReadBox (only that box's bytes) when the
// checkpoint has the param, else InitializeBox with the model's seed; or, for
// cells that pieces of `sources` meet, from those pieces (local: copied or
// shared from this worker's resident versions; remote: ReadParam from the
// peer; see LoadModelRequest.sources). Loading the same (model, generation,
// version) again replaces it (model_loader.h).
//
// Params as state: ReadParam serves a box inside one held cell of a resident
// version (or of a version being staged here); StageParams/CommitParams build
// a new version from staged chunks (param_store.h); AbortParams drops one.
//
// Execute: runs the program's steps in order for one request (see
// server/worker/README.md for the step semantics and error codes). Concurrent
// requests (different request ids) run concurrently; each has its own
// buffers, keyed by (device, name). Sends go through the PeerTransport and
// never block the step loop; before returning, Execute waits (until the
// deadline) for its sends to be delivered and fails with the first send error
// (kUnavailable naming the peer). A send failure also aborts this request's
// pending receives at once.
//
// Thread-safety: all public methods are thread-safe (the store and the
// runner each guard their own tables); the heavy work (loading, executing)
// runs without their locks, on shared_ptr snapshots.
#ifndef MESHSERVE_SERVER_WORKER_WORKER_ENGINE_H_
#define MESHSERVE_SERVER_WORKER_WORKER_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/program/decode_step.h"
#include "common/program/program_ir.h"
#include "server/worker/model_store.h"
#include "server/worker/peer_transport.h"
#include "server/worker/program_runner.h"
#include "server/worker/rendezvous.h"

namespace meshserve {

class WorkerEngine {
 public:
  struct Options {
    // This worker's id; -1 = learn it from the first LoadModel (the worker of
    // its devices). Program.worker is used for sends.
    int64_t worker_id = -1;
    // Budget of a request whose ExecuteRequest has no deadline.
    absl::Duration default_deadline = absl::Seconds(60);
    // Budget of the ReadParam calls of one LoadModel or CommitParams.
    absl::Duration param_read_timeout = absl::Minutes(5);
    Rendezvous::Options rendezvous;
    // Runs a request whose steps take long (see program_run.h
    // kInlineComputeLimit) off the calling thread, e.g. on a thread pool.
    // Null: on the calling thread. Quick programs always run on the thread
    // that starts them or delivers the slice they wait for.
    std::function<void(std::function<void()>)> executor;
    // KV cache bytes per model for generation steps (kv_store.h); 0: none.
    int64_t kv_cache_bytes = 0;
  };

  // `transport` (not owned, may be null when no program sends to another
  // worker) must outlive the engine; shut it down before destroying the
  // engine so no delivery callback runs afterwards.
  WorkerEngine(Options options, PeerTransport* transport);
  ~WorkerEngine();
  WorkerEngine(const WorkerEngine&) = delete;
  WorkerEngine& operator=(const WorkerEngine&) = delete;

  // Returns the bytes of the version's distinct held buffers and the bytes
  // taken from `sources` (fetched from peers, copied or shared locally).
  // \error kInvalidArgument: bad JSON/model, mesh mismatch with the model file,
  //   device outside the mesh or repeated, device_workers of the wrong length,
  //   hosted devices mapped to different workers or to another worker id,
  //   checkpoint shape mismatch, sources that do not tile a held cell exactly
  //   (naming param, cell and piece) or name an unknown param; kNotFound /
  //   kDataLoss from the checkpoint; kNotFound for a local source that is not
  //   resident; the peers' ReadParam errors (kUnavailable naming the worker).
  absl::StatusOr<LoadModelResultIr> LoadModel(const LoadModelIr& request);

  // generation -1: every generation; version 0: every version. Programs of a
  // generation are dropped with its last version; stagings that match go too.
  // \error kNotFound when nothing matched.
  absl::Status UnloadModel(absl::string_view model, int64_t generation, int64_t version = 0);

  // Validates the program's structure (step kinds, ops, boxes, unique
  // tags) and stores it (replacing one with the same id).
  // \error kInvalidArgument naming the step index and value.
  absl::Status InstallProgram(ProgramIr program);

  // Drops installed program `program_id` and the buffers its param-cache
  // runs kept (the coordinator's program cache evicted it); runs holding it
  // finish. \error kNotFound naming it when it is not installed.
  absl::Status UninstallProgram(absl::string_view program_id);

  // Runs program `program_id` for `request_id` on param version
  // `param_version` of the program's (model, generation) (0: the newest
  // resident); returns the output slices. timeout <= 0:
  // Options::default_deadline. \error kNotFound naming model, generation and
  // version when that version is not resident.
  absl::StatusOr<std::vector<SliceIr>> Execute(absl::string_view program_id,
                                               absl::string_view request_id,
                                               std::vector<SliceIr> inputs,
                                               absl::Duration timeout,
                                               int64_t param_version = 0,
                                               ParamCacheMode param_cache = ParamCacheMode::kOff);
  // Execute without holding the caller's thread while a receive waits for a
  // peer: calls `done` once, inline for an error found at once, else from
  // the thread that runs the last step (Options::executor or a delivering
  // thread). The engine must outlive every pending `done`.
  void ExecuteAsync(absl::string_view program_id, std::string request_id,
                    std::vector<SliceIr> inputs, absl::Duration timeout, int64_t param_version,
                    std::function<void(absl::StatusOr<std::vector<SliceIr>>)> done);
  // With the program's param-only steps run, run and kept, or skipped
  // (ParamCacheMode; the coordinator passes one mode to every worker of a
  // request). A program without param-only steps runs whole in any mode.
  // \error kFailedPrecondition for kUse when no kFill run of this program kept
  //   its buffers for this version here (e.g. the version was loaded again).
  // With `decode`, the run is a generation step (common/program/decode_step.h)
  // over this worker's KV caches (kv_store.h; PrepareDecode's errors).
  void ExecuteAsync(absl::string_view program_id, std::string request_id,
                    std::vector<SliceIr> inputs, absl::Duration timeout, int64_t param_version,
                    ParamCacheMode param_cache,
                    std::function<void(absl::StatusOr<std::vector<SliceIr>>)> done,
                    std::shared_ptr<const DecodeStepIr> decode = nullptr);

  // The bytes of request.box of a held param of resident (model, generation,
  // version) (version 0: the newest), else of that version's staging here.
  // \error kNotFound naming the missing model version or param; kOutOfRange
  //   when the box is not inside one held cell; kInvalidArgument for a bad
  //   box; kFailedPrecondition for a staging box not fully staged yet.
  absl::StatusOr<ParamBytes> ReadParam(const ReadParamIr& request) const;

  // Stages one chunk of a push (param_store.h) into version chunk.version of
  // (model, generation), on the geometry of its newest resident version.
  // Returns the chunk's data bytes. \error kNotFound when (model, generation)
  //   is not resident; kAlreadyExists when that version is; ParamStore::Stage's;
  //   kAborted when that version's staging was aborted (AbortParams) after
  //   `stream_epoch` (StagingEpoch() when the chunk's stream began; -1: no
  //   check), so that a chunk still in flight from a cancelled push cannot
  //   land in the staging of the next push of the same version.
  absl::StatusOr<int64_t> StageParams(const StageChunkIr& chunk, int64_t stream_epoch = -1);
  // Counts AbortParams calls (see StageParams).
  int64_t StagingEpoch() const;

  // Fetches `fills` (ReadParam, peers in parallel) into the staging, checks
  // coverage and makes (model, generation, version) resident (see
  // CommitParamsRequest). Nothing resident changes on an error. A retry of a
  // commit that succeeded (version resident, nothing staged) succeeds again.
  // \error kInvalidArgument: version <= 0, fills outside the held cells,
  //   overlaps, a coverage gap (ParamStore::Commit); kNotFound for a missing
  //   base version; kAlreadyExists when the version is resident and staged.
  absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& request);

  // Drops the staging and the resident (model, generation, version);
  // idempotent. \error kInvalidArgument for version <= 0.
  absl::Status AbortParams(absl::string_view model, int64_t generation, int64_t version);

  // Receiving side of the data plane (see rendezvous.h).
  absl::Status DeliverChunk(absl::string_view request_id, absl::string_view tag,
                            int64_t total_bytes, int64_t offset,
                            absl::string_view data, int64_t src_worker,
                            std::optional<DType> dtype = std::nullopt) {
    return rendezvous().DeliverChunk(request_id, tag, total_bytes, offset, data, src_worker,
                                     dtype);
  }
  absl::Status DeliverSlice(absl::string_view request_id, absl::string_view tag,
                            std::string bytes, int64_t src_worker,
                            std::optional<DType> dtype = std::nullopt) {
    return rendezvous().DeliverSlice(request_id, tag, std::move(bytes), src_worker, dtype);
  }

  // Aborts the request's pending and future receives here.
  void Cancel(absl::string_view request_id, absl::string_view reason) {
    rendezvous().Cancel(request_id, reason);
  }
  // Fails them with `error` (Rendezvous::Fail).
  void Fail(absl::string_view request_id, absl::Status error) {
    rendezvous().Fail(request_id, std::move(error));
  }
  // Frees generation sequences' KV cache blocks (ReleaseSequences).
  void ReleaseSequences(absl::string_view model, int64_t generation,
                        const std::vector<int64_t>& seqs) {
    runner_.ReleaseKvSequences(model, generation, seqs);
  }

  WorkerStatusIr Status() const;

  int64_t worker_id() const { return models_.worker_id(); }
  void set_worker_id(int64_t id) { models_.set_worker_id(id); }
  const Options& options() const { return options_; }
  Rendezvous& rendezvous() { return runner_.rendezvous(); }

 private:
  const Options options_;
  PeerTransport* const transport_;
  ModelStore models_;
  ProgramRunner runner_;  // reads models_; destroyed first
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_WORKER_ENGINE_H_
