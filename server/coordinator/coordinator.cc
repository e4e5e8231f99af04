// Coordinator: creation, model repository, membership, the control loop, the
// status views, and the wiring of its parts: placement (placement_manager.h),
// parameter versions (param_versions.h), requests (infer_pipeline.h).
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/base/elastic_executor.h"
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
  if (options.push_ttl <= absl::ZeroDuration()) {
    return InvalidArgument("push_ttl must be positive, got ",
                           absl::FormatDuration(options.push_ttl));
  }
  if (options.replicas != 0 && options.replicas != 1) {
    return InvalidArgument("replicas must be 0 or 1, got ", options.replicas);
  }
  if (options.max_cached_programs < 1) {
    return InvalidArgument("max_cached_programs must be >= 1, got ", options.max_cached_programs);
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
      compiler_(std::move(compiler)),
      registry_(options_.heartbeat_interval, options_.missed_beats),
      connections_(std::move(factory), &registry_, options_.control_timeout),
      program_cache_(
          compiler_.get(),
          [this](int64_t worker_id, const std::string& address) {
            return connections_.Get(worker_id, address);
          },
          &registry_, options_.install_timeout,
          ProgramCacheOptions{static_cast<size_t>(options_.max_cached_programs),
                              &metrics_.registry,
                              [this](std::shared_ptr<const CompiledPlan> plan) {
                                UninstallEvicted(std::move(plan));
                              }}),
      param_cache_(options_.param_cache_bytes, &metrics_.param_cache_requests),
      placements_(options_, &registry_, &connections_, &program_cache_, &param_cache_, &metrics_),
      params_(options_, &placements_, &registry_, &connections_, [this] { WakeControl(); }),
      push_sessions_([this](const std::string& model) { return params_.BeginPush(model); },
                     PushSessions::Options{options_.push_ttl}),
      infer_(options_, &placements_, &registry_, &connections_, &program_cache_, &param_cache_,
             &metrics_),
      pulls_(PullSource{[this](const std::string& m) { return placements_.ServableModel(m); },
                        [this](const std::string& m) { return placements_.CurrentPlacement(m); },
                        [this](const std::string& m) {
                          for (const ModelStatus& s : placements_.ModelStatuses()) {
                            if (s.name == m) return s.held_versions;
                          }
                          return std::map<int64_t, int64_t>{};
                        },
                        [this](const std::string& m, int64_t v) -> std::shared_ptr<const void> {
                          return placements_.RetiredPlacement(m, v);
                        },
                        [this](int64_t id) { return registry_.IsAlive(id); },
                        [this](int64_t id, const std::string& address) {
                          return connections_.Get(id, address);
                        }},
             PullOptions{options_.pull_lease, 4096, options_.load_timeout}) {}

Coordinator::~Coordinator() {
  push_sessions_.Shutdown();  // their aborts wake the control loop: before it stops
  stop_.Notify();
  WakeControl();
  if (control_thread_.joinable()) control_thread_.join();
  absl::MutexLock lock(&uninstall_mu_);
  uninstall_mu_.Await(absl::Condition(
      +[](int64_t* pending) { return *pending == 0; }, &uninstalls_pending_));
}

void Coordinator::UninstallEvicted(std::shared_ptr<const CompiledPlan> plan) {
  {
    absl::MutexLock lock(&uninstall_mu_);
    evicted_.push_back(std::move(plan));
  }
  UninstallReleased();
}

void Coordinator::UninstallReleased() {
  std::vector<std::shared_ptr<const CompiledPlan>> released;
  {
    absl::MutexLock lock(&uninstall_mu_);
    // Held only here: no request has it, and none can get it (not cached).
    auto held = [](const std::shared_ptr<const CompiledPlan>& p) { return p.use_count() > 1; };
    auto first_released = std::stable_partition(evicted_.begin(), evicted_.end(), held);
    std::move(first_released, evicted_.end(), std::back_inserter(released));
    evicted_.erase(first_released, evicted_.end());
    if (released.empty()) return;
    ++uninstalls_pending_;
  }
  ElasticExecutor::Shared().Schedule([this, released = std::move(released)] {
    for (const std::shared_ptr<const CompiledPlan>& plan : released) UninstallPlan(*plan);
    absl::MutexLock lock(&uninstall_mu_);
    --uninstalls_pending_;
  });
}

void Coordinator::UninstallPlan(const CompiledPlan& plan) {
  if (program_cache_.HasProgram(plan.program_id)) return;  // installed again under its id
  std::vector<int64_t> ids;
  for (const auto& [worker, program] : plan.programs) ids.push_back(worker);
  ParallelCall(ids, [&](int64_t id) {
    absl::StatusOr<WorkerInfo> info = registry_.Get(id);
    if (!info.ok() || !info->alive) return absl::OkStatus();  // nothing to release
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = connections_.Get(id, info->address);
    const std::string& program_id = plan.programs.at(id).program_id;
    absl::Status s = client.ok()
                         ? (*client)->UninstallProgram(program_id, options_.control_timeout)
                         : client.status();
    // NOT_FOUND: its generation was unloaded already.
    if (!s.ok() && !absl::IsNotFound(s)) {
      MS_LOG(WARNING) << "UninstallProgram '" << program_id << "' on worker " << id
                      << " (evicted; the worker keeps it until its generation unloads): " << s;
    }
    return absl::OkStatus();
  });
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
  std::map<std::string, std::string> file_of;  // model name -> its file
  for (const auto& path : files) {
    const std::string file = path.string();
    std::string name = path.stem().string();
    std::shared_ptr<const ModelFile> model;
    absl::Status error;
    absl::StatusOr<ModelFile> loaded = LoadModelFile(file);
    if (loaded.ok()) {
      if (!loaded->name.empty()) name = loaded->name;
      error = compiler_->ValidateModel(*loaded);
      model = std::make_shared<const ModelFile>(*std::move(loaded));
    } else {
      error = AnnotateStatus(loaded.status(), file);
    }
    if (file_of.count(name)) {
      error =
          InvalidArgument("model name '", name, "' in ", file, " is also used by ", file_of[name]);
      name = path.filename().string();
    }
    if (error.ok()) {
      MS_LOG(INFO) << "model '" << name << "' loaded from " << file;
    } else {
      MS_LOG(WARNING) << "model file " << file << " not servable: " << error;
    }
    if (error.ok() && model->batching) infer_.AddBatcher(name, *model->batching);
    file_of[name] = file;
    placements_.AddModel(name, file, std::move(model), std::move(error));
  }
}

absl::StatusOr<int64_t> Coordinator::RegisterWorker(const std::string& address, int32_t cores,
                                                    int64_t memory_bytes,
                                                    int64_t previous_worker_id, bool warms_up,
                                                    int64_t* warm_bytes) {
  int64_t bytes = 0;
  if (warms_up) {
    for (const ModelStatus& m : placements_.ModelStatuses()) {
      if (m.placement == nullptr || m.model == nullptr) continue;
      for (const ParamDef& param : m.model->params) {
        int64_t n = DTypeSize(param.dtype) * (1 + m.replicas);
        for (int64_t dim : param.shape) n *= dim;
        bytes += n;
      }
    }
    bytes /= registry_.NumJoinedWorkers() + 1;  // + the joiner
  }
  MS_ASSIGN_OR_RETURN(int64_t id, registry_.Register(address, cores, memory_bytes,
                                                     previous_worker_id, absl::Now(),
                                                     /*warming=*/bytes > 0));
  connections_.Registered(id, address);
  if (warm_bytes != nullptr) *warm_bytes = bytes;
  return id;
}

bool Coordinator::Heartbeat(int64_t worker_id, bool draining, bool warm) {
  const int64_t epoch = registry_.epoch();
  const bool known = registry_.Heartbeat(worker_id, draining, absl::Now(), warm);
  if (registry_.epoch() != epoch) WakeControl();  // e.g. a warm joiner: place it now
  return known;
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
  placements_.Tick();
  UninstallReleased();
}

bool Coordinator::IsReady() const { return placements_.IsReady(); }

std::vector<ModelStatus> Coordinator::ModelStatuses() const { return placements_.ModelStatuses(); }

absl::StatusOr<InferResponse> Coordinator::Infer(const InferRequest& request) {
  return infer_.Infer(request);
}

void Coordinator::InferAsync(InferRequest request, InferDone done) {
  infer_.InferAsync(std::move(request), std::move(done));
}

absl::StatusOr<std::unique_ptr<ParamPush>> Coordinator::BeginPush(const std::string& model,
                                                                   absl::Time deadline) {
  return params_.BeginPush(model, deadline);
}

absl::Status Coordinator::PullParams(const std::string& model,
                                     const std::vector<std::string>& params,
                                     const std::function<absl::Status(PullChunk)>& sink) {
  return params_.PullParams(model, params, sink);
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
        auto client = connections_.Get(id, by_id.at(id)->info.address);
        return client.ok() ? (*client)->Status(options_.control_timeout) : client.status();
      });
  for (size_t i = 0; i < live.size(); ++i) by_id.at(live[i])->status = std::move(statuses[i]);
  for (const ModelStatus& m : ModelStatuses()) {
    if (m.placement == nullptr) continue;
    for (WorkerView& v : views) {
      auto it = m.placement->devices_by_worker.find(v.info.worker_id);
      if (it == m.placement->devices_by_worker.end()) continue;
      WorkerView::Hosted h{
          m.name, m.placement->generation, it->second,
          {},     m.placement->version,    m.placement->ReplicaDevices(v.info.worker_id)};
      for (int64_t d : it->second) h.coords.push_back(DeviceCoordsString(m.placement->mesh, d));
      v.placements.push_back(std::move(h));
    }
  }
  return views;
}

absl::StatusOr<DescribeResult> Coordinator::Describe(const std::string& model,
                                                     const InputShapes& input_shapes) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> file, placements_.ServableModel(model));
  std::shared_ptr<const Placement> placement = placements_.CurrentPlacement(model);
  if (placement == nullptr) {
    // Describe on the model's own mesh (a -1 axis as 1) until it is placed.
    std::vector<PlacementWorker> nominal = {{0, "unplaced"}};
    MS_ASSIGN_OR_RETURN(Placement p, ComputePlacement(*file, nominal, 0));
    return compiler_->Describe(*file, p.Devices(), input_shapes);
  }
  return compiler_->Describe(*file, placement->Devices(), input_shapes);
}

}  // namespace meshserve
