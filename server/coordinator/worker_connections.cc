// WorkerConnections (worker_connections.h).
#include "server/coordinator/worker_connections.h"

#include <vector>

#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace meshserve {

absl::StatusOr<std::shared_ptr<WorkerClient>> WorkerConnections::Get(int64_t worker_id,
                                                                     const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(worker_id);
  if (it != clients_.end() && it->second.first == address) return it->second.second;
  MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, factory_(worker_id, address), "worker ",
                      worker_id);
  clients_[worker_id] = {address, client};
  return client;
}

void WorkerConnections::Registered(int64_t worker_id, const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(worker_id);
  if (it != clients_.end() && it->second.first != address) clients_.erase(it);
}

void WorkerConnections::WatchDropped() {
  std::vector<std::pair<int64_t, std::shared_ptr<WorkerClient>>> clients;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : clients_) clients.emplace_back(id, entry.second);
  }
  for (const auto& [id, client] : clients) {
    if (client->ConnectionDropped() && registry_->MarkSuspect(id)) {
      MS_LOG(WARNING) << "worker " << id << ": connection dropped; probing it now";
    }
  }
}

void WorkerConnections::ProbeSuspects() {
  for (int64_t id : registry_->SuspectWorkers()) {
    absl::StatusOr<WorkerInfo> info = registry_->Get(id);
    if (!info.ok()) continue;
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = Get(id, info->address);
    absl::Status probe = client.ok() ? (*client)->Status(probe_timeout_).status() : client.status();
    if (probe.ok()) {
      registry_->ClearSuspect(id);
    } else {
      MS_LOG(WARNING) << "suspect worker " << id << " failed its probe: " << probe;
      registry_->MarkDead(id);
    }
  }
}

}  // namespace meshserve
