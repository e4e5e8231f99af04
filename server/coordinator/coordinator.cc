// Coordinator: creation, model repository, membership, the control loop and
// the status views. Placement is in coordinator_place.cc, requests in
// coordinator_infer.cc, pushes and pulls in coordinator_params.cc.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, WorkerClientFactory client_factory,
    std::unique_ptr<ModelCompiler> compiler) {
  if (!client_factory) return InvalidArgument("Coordinator: no worker client factory");
  if (compiler == nullptr) return InvalidArgument("Coordinator: no model compiler");
  if (options.min_workers < 1) {
    return InvalidArgument("min_workers must be >= 1, got ", options.min_workers);
  }
  if (options.max_concurrent_pushes < 1) {
    return InvalidArgument("max_concurrent_pushes must be >= 1, got ",
                           options.max_concurrent_pushes);
  }
  if (options.replicas != 0 && options.replicas != 1) {
    return InvalidArgument("replicas must be 0 or 1, got ", options.replicas);
  }
  if (options.forget_dead_after < absl::ZeroDuration()) {
    return InvalidArgument("forget_dead_after must not be negative, got ",
                           absl::FormatDuration(options.forget_dead_after));
  }
  if (options.rejoin_quiet < absl::ZeroDuration()) {
    return InvalidArgument("rejoin quiet time must not be negative, got ",
                           absl::FormatDuration(options.rejoin_quiet));
  }
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    return InvalidArgument("heartbeat interval must be positive, got ",
                           absl::FormatDuration(options.heartbeat_interval));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(options.model_dir, ec)) {
    return NotFound("model_dir '", options.model_dir, "' is not a directory");
  }
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(options), std::move(client_factory), std::move(compiler)));
  c->LoadModelDir();
  if (c->options_.run_control_thread) {
    c->control_thread_ = std::thread([raw = c.get()] { raw->ControlLoop(); });
  }
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options, WorkerClientFactory factory,
                         std::unique_ptr<ModelCompiler> compiler)
    : options_(std::move(options)),
      client_factory_(std::move(factory)),
      compiler_(std::move(compiler)),
      registry_(options_.heartbeat_interval, options_.missed_beats),
      program_cache_(
          compiler_.get(),
          [this](int64_t worker_id, const std::string& address) {
            return Client(worker_id, address);
          },
          &registry_, options_.install_timeout),
      param_cache_(options_.param_cache_bytes, &metrics_.param_cache_requests) {}

Coordinator::~Coordinator() {
  stop_.Notify();
  WakeControl();
  if (control_thread_.joinable()) control_thread_.join();
}

void Coordinator::WakeControl() {
  absl::MutexLock lock(&wake_mu_);
  wake_ = true;
}

void Coordinator::LoadModelDir() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.model_dir, ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  absl::MutexLock lock(&mu_);
  for (const auto& path : files) {
    ModelEntry entry;
    entry.file = path.string();
    std::string name = path.stem().string();
    absl::StatusOr<ModelFile> model = LoadModelFile(entry.file);
    if (model.ok()) {
      if (!model->name.empty()) name = model->name;
      entry.error = compiler_->ValidateModel(*model);
      entry.model = std::make_shared<const ModelFile>(*std::move(model));
    } else {
      entry.error = AnnotateStatus(model.status(), entry.file);
    }
    if (models_.count(name)) {
      entry.error = InvalidArgument("model name '", name, "' in ", entry.file,
                                    " is also used by ", models_[name].file);
      name = path.filename().string();
    }
    if (entry.error.ok()) {
      MS_LOG(INFO) << "model '" << name << "' loaded from " << entry.file;
    } else {
      MS_LOG(WARNING) << "model file " << entry.file << " not servable: " << entry.error;
    }
    if (entry.error.ok() && entry.model->batching) {
      batchers_[name] = std::make_unique<Batcher>(
          *entry.model->batching,
          [this](const InferRequest& r) -> absl::StatusOr<InferResponse> {
            MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> model, ServableModel(r.model));
            return InferOne(r, std::move(model), /*may_batch=*/false, /*recorder=*/nullptr);
          });
    }
    models_[name] = std::move(entry);
  }
}

absl::StatusOr<int64_t> Coordinator::RegisterWorker(const std::string& address,
                                                    int32_t cores, int64_t memory_bytes,
                                                    int64_t previous_worker_id) {
  MS_ASSIGN_OR_RETURN(int64_t id, registry_.Register(address, cores, memory_bytes,
                                                     previous_worker_id, absl::Now()));
  absl::MutexLock lock(&clients_mu_);
  auto it = clients_.find(id);
  if (it != clients_.end() && it->second.first != address) clients_.erase(it);
  return id;
}

bool Coordinator::Heartbeat(int64_t worker_id, bool draining) {
  return registry_.Heartbeat(worker_id, draining, absl::Now());
}

absl::StatusOr<std::shared_ptr<WorkerClient>> Coordinator::Client(
    int64_t worker_id, const std::string& address) {
  absl::MutexLock lock(&clients_mu_);
  auto it = clients_.find(worker_id);
  if (it != clients_.end() && it->second.first == address) return it->second.second;
  MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client,
                      client_factory_(worker_id, address), "worker ", worker_id);
  clients_[worker_id] = {address, client};
  return client;
}

void Coordinator::ControlLoop() {
  const absl::Duration period = options_.heartbeat_interval / 2;
  while (!stop_.HasBeenNotified()) {
    {
      absl::MutexLock lock(&wake_mu_);
      wake_mu_.AwaitWithTimeout(absl::Condition(&wake_), period);
      wake_ = false;
    }
    if (stop_.HasBeenNotified()) break;
    Tick();
  }
}

void Coordinator::Tick() {
  absl::MutexLock control(&control_mu_);
  registry_.ExpireDead(absl::Now());
  WatchConnections();
  ProbeSuspects();
  PlaceModels();
  UnloadRetired();
  ForgetDeparted();
}

void Coordinator::ForgetDeparted() {
  std::set<int64_t> in_use;
  {
    absl::MutexLock lock(&mu_);
    auto add = [&in_use](const Placement& p) {
      for (int64_t id : p.WorkerIds()) in_use.insert(id);
      for (const auto& [id, devices] : p.replica_devices_by_worker) in_use.insert(id);
    };
    for (const auto& [name, entry] : models_) {
      if (entry.placement != nullptr) add(*entry.placement);
    }
    for (const auto& p : retired_) add(*p);
  }
  for (int64_t id : registry_.ForgetDead(absl::Now(), options_.forget_dead_after,
                                         [&in_use](int64_t id) { return in_use.count(id) > 0; })) {
    MS_LOG(INFO) << "worker " << id << " forgotten: dead for "
                 << absl::FormatDuration(options_.forget_dead_after)
                 << " and no placement uses it";
  }
}

void Coordinator::WatchConnections() {
  std::vector<std::pair<int64_t, std::shared_ptr<WorkerClient>>> clients;
  {
    absl::MutexLock lock(&clients_mu_);
    for (const auto& [id, entry] : clients_) clients.emplace_back(id, entry.second);
  }
  for (const auto& [id, client] : clients) {
    if (client->ConnectionDropped() && registry_.MarkSuspect(id)) {
      MS_LOG(WARNING) << "worker " << id << ": connection dropped; probing it now";
    }
  }
}

void Coordinator::ProbeSuspects() {
  for (int64_t id : registry_.SuspectWorkers()) {
    absl::StatusOr<WorkerInfo> info = registry_.Get(id);
    if (!info.ok()) continue;
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = Client(id, info->address);
    absl::Status probe = client.ok() ? (*client)->Status(options_.control_timeout).status()
                                     : client.status();
    if (probe.ok()) {
      registry_.ClearSuspect(id);
    } else {
      MS_LOG(WARNING) << "suspect worker " << id << " failed its probe: " << probe;
      registry_.MarkDead(id);
    }
  }
}

absl::StatusOr<std::shared_ptr<const ModelFile>> Coordinator::ServableModel(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    std::vector<std::string> names;
    for (const auto& [known, entry] : models_) names.push_back(known);
    return NotFound("model '", name, "' not found (models: ", absl::StrJoin(names, ", "), ")");
  }
  if (!it->second.error.ok()) {
    return FailedPrecondition("model '", name, "' cannot be served: ",
                              it->second.error.message());
  }
  return it->second.model;
}

std::shared_ptr<const Placement> Coordinator::CurrentPlacement(
    const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : it->second.placement;
}

bool Coordinator::IsReady() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    if (!entry.error.ok()) continue;
    if (entry.placement == nullptr) return false;
    for (const auto& [id, address] : entry.placement->worker_addresses) {
      if (!registry_.IsAlive(id)) return false;
    }
  }
  return true;
}

std::vector<ModelStatus> Coordinator::ModelStatuses() const {
  const int live = static_cast<int>(registry_.PlaceableWorkers().size());
  const bool returning = AwaitingReturningWorkers(absl::Now());
  std::vector<ModelStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : models_) {
    ModelStatus s;
    s.name = name;
    s.file = entry.file;
    s.error = entry.error;
    s.model = entry.model;
    s.placement = entry.placement;
    s.scale_steps = entry.scale_steps;
    if (!entry.error.ok()) {
      s.state = absl::StrCat("error: ", entry.error.message());
    } else if (entry.placement != nullptr) {
      s.ready = true;
      s.state = "ready";
      s.mesh = entry.placement->mesh.ToString();
      s.generation = entry.placement->generation;
      s.version = entry.placement->version;
      s.replicas = entry.placement->replica_devices_by_worker.empty() ? 0 : 1;
    } else if (!entry.placement_error.ok()) {
      s.state = absl::StrCat("placement failed: ", entry.placement_error.message());
    } else if (returning && live >= options_.min_workers) {
      s.state = absl::StrCat("waiting for returning workers to register again (", live, " back)");
    } else {
      s.state = absl::StrCat("waiting for workers (", live, "/", options_.min_workers, ")");
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<ModelStatus> Coordinator::GetModelStatus(const std::string& name) const {
  for (ModelStatus& s : ModelStatuses()) {
    if (s.name == name) return std::move(s);
  }
  return NotFound("model '", name, "' not found");
}

std::vector<WorkerView> Coordinator::Workers() {
  std::vector<WorkerView> views;
  for (const WorkerInfo& info : registry_.AllWorkers()) {
    WorkerView v;
    v.info = info;
    views.push_back(std::move(v));
  }
  std::vector<int64_t> live;
  std::map<int64_t, WorkerView*> by_id;
  for (WorkerView& v : views) {
    if (!v.info.alive) continue;
    live.push_back(v.info.worker_id);
    by_id[v.info.worker_id] = &v;
  }
  std::vector<absl::StatusOr<WorkerStatusIr>> statuses =
      ParallelCall(live, [&](int64_t id) -> absl::StatusOr<WorkerStatusIr> {
        auto client = Client(id, by_id.at(id)->info.address);
        return client.ok() ? (*client)->Status(options_.control_timeout) : client.status();
      });
  for (size_t i = 0; i < live.size(); ++i) by_id.at(live[i])->status = std::move(statuses[i]);
  for (const ModelStatus& m : ModelStatuses()) {
    if (m.placement == nullptr) continue;
    for (WorkerView& v : views) {
      auto it = m.placement->devices_by_worker.find(v.info.worker_id);
      if (it == m.placement->devices_by_worker.end()) continue;
      WorkerView::Hosted h{m.name, m.placement->generation, it->second, {},
                           m.placement->version, m.placement->ReplicaDevices(v.info.worker_id)};
      for (int64_t d : it->second) h.coords.push_back(DeviceCoordsString(m.placement->mesh, d));
      v.placements.push_back(std::move(h));
    }
  }
  return views;
}

absl::StatusOr<DescribeResult> Coordinator::Describe(const std::string& model,
                                                     const InputShapes& input_shapes) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> file, ServableModel(model));
  std::shared_ptr<const Placement> placement = CurrentPlacement(model);
  if (placement == nullptr) {
    // Describe on the model's own mesh (a -1 axis as 1) until it is placed.
    std::vector<PlacementWorker> nominal = {{0, "unplaced"}};
    MS_ASSIGN_OR_RETURN(Placement p, ComputePlacement(*file, nominal, 0));
    return compiler_->Describe(*file, p.Devices(), input_shapes);
  }
  return compiler_->Describe(*file, placement->Devices(), input_shapes);
}

}  // namespace meshserve
