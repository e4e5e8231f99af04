#include "server/worker/worker_engine.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/tensor/blas.h"

namespace meshserve {

namespace {

ModelStore::Options StoreOptions(const WorkerEngine::Options& options) {
  ModelStore::Options out;
  out.worker_id = options.worker_id;
  out.param_read_timeout = options.param_read_timeout;
  return out;
}

ProgramRunner::Options RunnerOptions(const WorkerEngine::Options& options) {
  ProgramRunner::Options out;
  out.default_deadline = options.default_deadline;
  out.rendezvous = options.rendezvous;
  out.executor = options.executor;
  out.kv_cache_bytes = options.kv_cache_bytes;
  return out;
}

}  // namespace

WorkerEngine::WorkerEngine(Options options, PeerTransport* transport)
    : options_(std::move(options)),
      transport_(transport),
      models_(StoreOptions(options_), transport),
      runner_(RunnerOptions(options_), transport, &models_) {}

WorkerEngine::~WorkerEngine() = default;

absl::StatusOr<LoadModelResultIr> WorkerEngine::LoadModel(const LoadModelIr& request) {
  if (transport_ != nullptr) transport_->UpdatePeers(request.worker_addresses);
  return models_.Load(request);
}

absl::Status WorkerEngine::UnloadModel(absl::string_view model, int64_t generation,
                                       int64_t version) {
  if (version == 0) runner_.DropKvCaches(model, generation);
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> gone, models_.Unload(model, generation, version));
  runner_.DropPrograms(model, gone);
  return absl::OkStatus();
}

absl::Status WorkerEngine::InstallProgram(ProgramIr program) {
  return runner_.Install(std::move(program));
}

absl::Status WorkerEngine::UninstallProgram(absl::string_view program_id) {
  return runner_.Uninstall(program_id);
}

absl::StatusOr<std::vector<SliceIr>> WorkerEngine::Execute(absl::string_view program_id,
                                                           absl::string_view request_id,
                                                           std::vector<SliceIr> inputs,
                                                           absl::Duration timeout,
                                                           int64_t param_version,
                                                           ParamCacheMode param_cache) {
  return runner_.Execute(program_id, request_id, std::move(inputs), timeout, param_version,
                         param_cache);
}

void WorkerEngine::ExecuteAsync(absl::string_view program_id, std::string request_id,
                                std::vector<SliceIr> inputs, absl::Duration timeout,
                                int64_t param_version,
                                std::function<void(absl::StatusOr<std::vector<SliceIr>>)> done) {
  runner_.ExecuteAsync(program_id, std::move(request_id), std::move(inputs), timeout,
                       param_version, ParamCacheMode::kOff, std::move(done), nullptr);
}

void WorkerEngine::ExecuteAsync(absl::string_view program_id, std::string request_id,
                                std::vector<SliceIr> inputs, absl::Duration timeout,
                                int64_t param_version, ParamCacheMode param_cache,
                                std::function<void(absl::StatusOr<std::vector<SliceIr>>)> done,
                                std::shared_ptr<const DecodeStepIr> decode) {
  runner_.ExecuteAsync(program_id, std::move(request_id), std::move(inputs), timeout,
                       param_version, param_cache, std::move(done), std::move(decode));
}

absl::StatusOr<ParamBytes> WorkerEngine::ReadParam(const ReadParamIr& request) const {
  return models_.ReadParam(request);
}

absl::StatusOr<int64_t> WorkerEngine::StageParams(const StageChunkIr& chunk,
                                                  int64_t stream_epoch) {
  return models_.StageParams(chunk, stream_epoch);
}

int64_t WorkerEngine::StagingEpoch() const { return models_.StagingEpoch(); }

absl::StatusOr<CommitResultIr> WorkerEngine::CommitParams(const CommitParamsIr& request) {
  return models_.CommitParams(request);
}

absl::Status WorkerEngine::AbortParams(absl::string_view model, int64_t generation,
                                       int64_t version) {
  return models_.AbortParams(model, generation, version);
}

WorkerStatusIr WorkerEngine::Status() const {
  WorkerStatusIr status;
  status.worker_id = worker_id();
  status.blas_core = BlasCoreName();
  status.blas_config = BlasConfig();
  status.blas_threads = BlasThreads();
  status.models = models_.Hosted();
  status.programs = runner_.num_programs();
  status.requests_served = runner_.requests_served();
  return status;
}

}  // namespace meshserve
