// WorkerConnections: the coordinator's one WorkerClient per worker, made by
// the WorkerClientFactory on first use and again when a worker registers at
// a new address; and the two membership checks that look at the connections:
// a dropped connection marks its worker suspect, and a suspect is probed
// (Status) and marked dead when the probe fails (worker_registry.h).
//
// Thread-safety: thread-safe. mu_ is a leaf lock, never held during an RPC.
#ifndef MESHSERVE_SERVER_COORDINATOR_WORKER_CONNECTIONS_H_
#define MESHSERVE_SERVER_COORDINATOR_WORKER_CONNECTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class WorkerConnections {
 public:
  // `registry` must outlive this.
  WorkerConnections(WorkerClientFactory factory, WorkerRegistry* registry,
                    absl::Duration probe_timeout)
      : factory_(std::move(factory)), registry_(registry), probe_timeout_(probe_timeout) {}
  WorkerConnections(const WorkerConnections&) = delete;
  WorkerConnections& operator=(const WorkerConnections&) = delete;

  // The client of `worker_id` at `address` (made now if it has none there).
  // \error the factory's, annotated with the worker.
  absl::StatusOr<std::shared_ptr<WorkerClient>> Get(int64_t worker_id, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `worker_id` registered at `address`: a client to another address goes.
  void Registered(int64_t worker_id, const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  // Marks suspect every worker whose connection dropped (ConnectionDropped).
  void WatchDropped() ABSL_LOCKS_EXCLUDED(mu_);
  // Probes every suspect: cleared when it answers, marked dead when not.
  void ProbeSuspects();

 private:
  const WorkerClientFactory factory_;
  WorkerRegistry* const registry_;
  const absl::Duration probe_timeout_;
  absl::Mutex mu_;
  std::map<int64_t, std::pair<std::string, std::shared_ptr<WorkerClient>>> clients_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WORKER_CONNECTIONS_H_
