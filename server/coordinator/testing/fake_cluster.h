// FakeCluster: hands out one FakeWorkerClient (fake_worker_client.h) per
// worker id, created on first use, as the coordinator's WorkerClientFactory.
//
// Thread-safety: thread-safe (one mutex).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_CLUSTER_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_CLUSTER_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

class FakeCluster {
 public:
  WorkerClientFactory Factory();
  std::shared_ptr<FakeWorkerClient> Worker(int64_t worker_id);

 private:
  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<FakeWorkerClient>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_CLUSTER_H_
