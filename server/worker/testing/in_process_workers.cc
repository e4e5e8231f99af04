#include "server/worker/testing/in_process_workers.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/base/elastic_executor.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "proto/worker_service.pb.h"

namespace meshserve {

InProcessWorkers::InProcessWorkers(int num_workers, Options options)
    : transport_(std::make_unique<InMemoryTransport>(options.chunk_bytes)) {
  for (int i = 0; i < num_workers; ++i) {
    ShardWorker::Options worker_options = options.worker;
    worker_options.worker_id = i;
    workers_.push_back(std::make_unique<ShardWorker>(worker_options, transport_.get()));
    transport_->Register(i, &workers_.back()->engine());
  }
}

InProcessWorkers::~InProcessWorkers() = default;

ShardWorker& InProcessWorkers::worker(int64_t id) {
  MS_CHECK(id >= 0 && id < num_workers()) << "worker " << id;
  return *workers_[id];
}

absl::StatusOr<int64_t> InProcessWorkers::LoadModel(const LoadModelRequest& request) {
  std::map<int64_t, std::vector<int64_t>> devices_by_worker;
  for (int device = 0; device < request.device_workers_size(); ++device) {
    const int64_t w = request.device_workers(device);
    if (w < 0 || w >= num_workers()) {
      return InvalidArgument("device ", device, " maps to worker ", w, " but the cluster has ",
                             num_workers(), " workers");
    }
    devices_by_worker[w].push_back(device);
  }
  int64_t total = 0;
  for (const auto& [w, devices] : devices_by_worker) {
    LoadModelRequest mine = request;
    mine.clear_devices();
    for (int64_t d : devices) mine.add_devices(d);
    LoadModelResponse response;
    MS_RETURN_IF_ERROR(workers_[w]->LoadModel(mine, &response), "worker ", w);
    total += response.param_bytes();
  }
  return total;
}

absl::Status InProcessWorkers::InstallPrograms(absl::Span<const Program> programs) {
  for (const Program& program : programs) {
    if (program.worker() < 0 || program.worker() >= num_workers()) {
      return InvalidArgument("program '", program.program_id(), "' is for worker ",
                             program.worker(), " but the cluster has ", num_workers(),
                             " workers");
    }
    MS_RETURN_IF_ERROR(workers_[program.worker()]->InstallProgram(program), "worker ",
                       program.worker());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<int64_t, ExecuteResponse>> InProcessWorkers::Execute(
    std::map<int64_t, ExecuteRequest> requests) {
  for (const auto& [w, request] : requests) {
    if (w < 0 || w >= num_workers()) {
      return InvalidArgument("request for worker ", w, " but the cluster has ",
                             num_workers(), " workers");
    }
  }
  std::map<int64_t, ExecuteResponse> responses;
  std::map<int64_t, absl::Status> statuses;
  for (const auto& [w, request] : requests) {
    responses[w];
    statuses[w];
  }
  // All calls start at once on the shared executor: they wait for each
  // other's data, so none may queue behind another.
  absl::BlockingCounter done(static_cast<int>(requests.size()));
  for (auto& [w, request] : requests) {
    ElasticExecutor::Shared().Schedule([this, w = w, &request = request, &responses,
                                        &statuses, &requests, &done]() {
      absl::Status status = workers_[w]->Execute(&request, &responses.at(w));
      if (!status.ok()) {
        // As the coordinator does: abort the request on the others.
        CancelRequest cancel;
        cancel.set_request_id(request.request_id());
        cancel.set_reason(absl::StrCat("worker ", w, " failed: ", status.message()));
        for (const auto& [other, unused] : requests) {
          if (other != w) workers_[other]->Cancel(cancel);
        }
      }
      statuses.at(w) = std::move(status);
      done.DecrementCount();
    });
  }
  done.Wait();
  // Prefer a root cause over the cancellations it triggered.
  for (const auto& [w, status] : statuses) {
    if (!status.ok() && status.code() != absl::StatusCode::kAborted) {
      return AnnotateStatus(status, "worker ", w);
    }
  }
  for (const auto& [w, status] : statuses) {
    if (!status.ok()) return AnnotateStatus(status, "worker ", w);
  }
  return responses;
}

}  // namespace meshserve
