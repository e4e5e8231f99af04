#include "server/coordinator/fan_out.h"

#include <memory>
#include <utility>

#include "common/base/elastic_executor.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

bool IsWorkerFailure(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsCancelled(status);
}

// WorkerClient's default (worker_client.h): one executor thread per call, as
// a blocking Execute needs. `done` keeps the client alive (StartRun,
// coordinator_infer.cc).
void WorkerClient::ExecuteAsync(ExecuteCall call, absl::Duration timeout, ExecuteDone done) {
  auto moved = std::make_shared<ExecuteCall>(std::move(call));
  ElasticExecutor::Shared().Schedule([this, moved, timeout, done = std::move(done)] {
    done(Execute(std::move(*moved), timeout));
  });
}

}  // namespace meshserve
