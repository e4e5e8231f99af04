#include "server/coordinator/testing/fake_cluster.h"

#include <string>

namespace meshserve {

WorkerClientFactory FakeCluster::Factory() {
  return [this](int64_t id, const std::string&)
             -> absl::StatusOr<std::shared_ptr<WorkerClient>> { return Worker(id); };
}

std::shared_ptr<FakeWorkerClient> FakeCluster::Worker(int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto& w = workers_[worker_id];
  if (w == nullptr) {
    w = std::make_shared<FakeWorkerClient>(worker_id,
                                           [this](int64_t id) { return Worker(id); });
  }
  return w;
}

}  // namespace meshserve
