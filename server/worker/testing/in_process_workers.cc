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

namespace meshserve {

InProcessWorkers::InProcessWorkers(int num_workers, Options options)
    : transport_(std::make_unique<InMemoryTransport>(options.chunk_bytes)) {
  for (int i = 0; i < num_workers; ++i) {
    WorkerEngine::Options worker_options = options.worker;
    worker_options.worker_id = i;
    workers_.push_back(std::make_unique<WorkerEngine>(worker_options, transport_.get()));
    transport_->Register(i, workers_.back().get());
  }
}

InProcessWorkers::~InProcessWorkers() = default;

WorkerEngine& InProcessWorkers::worker(int64_t id) {
  MS_CHECK(id >= 0 && id < num_workers()) << "worker " << id;
  return *workers_[id];
}

absl::StatusOr<int64_t> InProcessWorkers::LoadModel(const LoadModelIr& request) {
  std::map<int64_t, std::vector<int64_t>> devices_by_worker;
  for (size_t device = 0; device < request.device_workers.size(); ++device) {
    const int64_t w = request.device_workers[device];
    if (w < 0 || w >= num_workers()) {
      return InvalidArgument("device ", device, " maps to worker ", w, " but the cluster has ",
                             num_workers(), " workers");
    }
    devices_by_worker[w].push_back(device);
  }
  int64_t total = 0;
  for (const auto& [w, devices] : devices_by_worker) {
    LoadModelIr mine = request;
    mine.devices = devices;
    MS_ASSIGN_OR_RETURN(LoadModelResultIr result, workers_[w]->LoadModel(mine), "worker ", w);
    total += result.param_bytes;
  }
  return total;
}

absl::Status InProcessWorkers::InstallPrograms(absl::Span<const ProgramIr> programs) {
  for (const ProgramIr& program : programs) {
    if (program.worker < 0 || program.worker >= num_workers()) {
      return InvalidArgument("program '", program.program_id, "' is for worker ",
                             program.worker, " but the cluster has ", num_workers(),
                             " workers");
    }
    MS_RETURN_IF_ERROR(workers_[program.worker]->InstallProgram(program), "worker ",
                       program.worker);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<int64_t, std::vector<SliceIr>>> InProcessWorkers::Execute(
    absl::string_view program_id, absl::string_view request_id,
    std::map<int64_t, std::vector<SliceIr>> inputs, absl::Duration timeout) {
  for (const auto& [w, unused] : inputs) {
    if (w < 0 || w >= num_workers()) {
      return InvalidArgument("request for worker ", w, " but the cluster has ",
                             num_workers(), " workers");
    }
  }
  std::map<int64_t, std::vector<SliceIr>> outputs;
  std::map<int64_t, absl::Status> statuses;
  for (const auto& [w, unused] : inputs) {
    outputs[w];
    statuses[w];
  }
  // All calls start at once on the shared executor: they wait for each
  // other's data, so none may queue behind another.
  absl::BlockingCounter done(static_cast<int>(inputs.size()));
  for (auto& [w, mine] : inputs) {
    ElasticExecutor::Shared().Schedule([this, w = w, &mine = mine, program_id, request_id,
                                        timeout, &outputs, &statuses, &inputs, &done]() {
      absl::Status status;
      {  // `out` goes before DecrementCount: the caller then owns every status
        absl::StatusOr<std::vector<SliceIr>> out =
            workers_[w]->Execute(program_id, request_id, std::move(mine), timeout);
        status = out.status();
        if (out.ok()) outputs.at(w) = std::move(*out);
      }
      if (!status.ok()) {
        // As the coordinator does: abort the request on the others.
        const std::string reason = absl::StrCat("worker ", w, " failed: ", status.message());
        for (const auto& [other, unused] : inputs) {
          if (other != w) workers_[other]->Cancel(request_id, reason);
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
  return outputs;
}

}  // namespace meshserve
