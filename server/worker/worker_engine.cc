#include "server/worker/worker_engine.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/blas.h"
#include "server/worker/worker_engine_internal.h"

namespace meshserve {

WorkerEngine::WorkerEngine(Options options, PeerTransport* transport)
    : options_(options),
      transport_(transport),
      worker_id_(options.worker_id),
      rendezvous_(options.rendezvous) {}

WorkerEngine::~WorkerEngine() = default;

absl::StatusOr<int64_t> WorkerEngine::LoadModel(const LoadModelIr& request) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> loaded,
                      BuildLoadedModel(request, worker_id()));
  int64_t expected = -1;
  worker_id_.compare_exchange_strong(expected, loaded->worker_id);
  if (transport_ != nullptr) transport_->UpdatePeers(request.worker_addresses);
  const int64_t bytes = loaded->param_bytes;
  MS_LOG(INFO) << "loaded model '" << request.model << "' generation " << request.generation
               << " devices " << loaded->DevicesString() << ": " << bytes << " param bytes";
  absl::MutexLock lock(&mu_);
  models_[ModelKey(request.model, request.generation)] = std::move(loaded);
  return bytes;
}

absl::Status WorkerEngine::UnloadModel(absl::string_view model, int64_t generation) {
  absl::MutexLock lock(&mu_);
  int64_t removed = 0;
  for (auto it = models_.begin(); it != models_.end();) {
    auto cur = it++;
    if (cur->first.first == model && (generation == -1 || cur->first.second == generation)) {
      models_.erase(cur);
      ++removed;
    }
  }
  for (auto it = programs_.begin(); it != programs_.end();) {
    auto cur = it++;
    if (cur->second->model == model &&
        (generation == -1 || cur->second->generation == generation)) {
      programs_.erase(cur);
    }
  }
  if (removed == 0) {
    return NotFound("model '", model, "' generation ", generation, " is not loaded here");
  }
  return absl::OkStatus();
}

absl::Status WorkerEngine::InstallProgram(ProgramIr program) {
  MS_RETURN_IF_ERROR(ValidateProgram(program));
  auto shared = std::make_shared<const ProgramIr>(std::move(program));
  absl::MutexLock lock(&mu_);
  programs_[shared->program_id] = std::move(shared);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SliceIr>> WorkerEngine::Execute(absl::string_view program_id,
                                                           absl::string_view request_id,
                                                           std::vector<SliceIr> inputs,
                                                           absl::Duration timeout) {
  if (request_id.empty()) return InvalidArgument("request_id is empty");
  const absl::Time deadline =
      absl::Now() + (timeout > absl::ZeroDuration() ? timeout : options_.default_deadline);
  std::shared_ptr<const ProgramIr> program;
  std::shared_ptr<const LoadedModel> model;
  {
    absl::MutexLock lock(&mu_);
    auto p = programs_.find(program_id);
    if (p == programs_.end()) {
      return NotFound("unknown program '", program_id, "' (", programs_.size(),
                      " installed)");
    }
    program = p->second;
    auto m = models_.find(ModelKey(program->model, program->generation));
    if (m == models_.end()) {
      return FailedPrecondition("program '", program_id, "': model '", program->model,
                                "' generation ", program->generation,
                                " is not loaded on this worker");
    }
    model = m->second;
  }
  MS_RETURN_IF_ERROR(rendezvous_.StartRequest(request_id));
  RunContext context{&rendezvous_, transport_, worker_id()};
  absl::StatusOr<std::vector<SliceIr>> outputs =
      RunProgram(*program, *model, request_id, std::move(inputs), deadline, context);
  rendezvous_.FinishRequest(request_id);
  {
    absl::MutexLock lock(&mu_);
    ++requests_served_;
  }
  if (!outputs.ok()) {
    return AnnotateStatus(outputs.status(), "worker ", worker_id(), " program '",
                          program_id, "' request '", request_id, "'");
  }
  return outputs;
}

WorkerStatusIr WorkerEngine::Status() const {
  WorkerStatusIr status;
  status.worker_id = worker_id();
  status.blas_core = BlasCoreName();
  status.blas_config = BlasConfig();
  status.blas_threads = BlasThreads();
  absl::MutexLock lock(&mu_);
  for (const auto& [key, model] : models_) {
    HostedModelIr hosted;
    hosted.model = model->model;
    hosted.generation = model->generation;
    hosted.devices = model->devices;
    hosted.param_bytes = model->param_bytes;
    status.models.push_back(std::move(hosted));
  }
  status.programs = static_cast<int64_t>(programs_.size());
  status.requests_served = requests_served_;
  return status;
}

}  // namespace meshserve
