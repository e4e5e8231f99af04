#include "server/worker/model_store.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/model_loader.h"
#include "server/worker/params/param_sources.h"
#include "server/worker/params/param_store.h"

namespace meshserve {

namespace {

template <typename... Parts>
absl::Status AlreadyExists(const Parts&... parts) {
  return absl::AlreadyExistsError(absl::StrCat(parts...));
}

// Serves this worker's own ReadParam as a transport (a fill that names this
// worker as its source).
class SelfReader : public PeerTransport {
 public:
  explicit SelfReader(const ModelStore* store) : store_(store) {}
  void Send(OutgoingSlice slice, DoneCallback done) override {
    done(Internal("SelfReader sends nothing"));
  }
  absl::Status ReadParam(int64_t worker, const ReadParamIr& request, absl::Time deadline,
                         const ParamChunkSink& on_chunk) override {
    MS_ASSIGN_OR_RETURN(ParamBytes bytes, store_->ReadParam(request));
    const int64_t n = static_cast<int64_t>(bytes.bytes.size());
    return on_chunk(ParamChunkView{n, 0, bytes.bytes, bytes.dtype});
  }

 private:
  const ModelStore* const store_;
};

// CommitParams' fills, each read into its own box of `base`'s geometry (peers
// in parallel; a fill from `self_id` through `self`); adds the bytes read from
// peers to *fetched.
absl::Status FetchFills(const CommitParamsIr& request, const LoadedModel& base,
                        int64_t self_id, PeerTransport* self, PeerTransport* transport,
                        absl::Time deadline,
                        std::vector<std::pair<std::string, BoxTensor>>* boxes,
                        std::atomic<int64_t>* fetched) {
  boxes->reserve(request.fills.size());
  for (const ParamPieceIr& fill : request.fills) {
    auto held = base.held.find(fill.param);
    if (held == base.held.end()) {
      return InvalidArgument("fill of unknown param '", fill.param, "'");
    }
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(fill.box), "fill of '", fill.param, "'");
    if (box.rank() != static_cast<int>(held->second.shape.size())) {
      return InvalidArgument("fill ", box.ToString(), " of '", fill.param,
                             "' has the wrong rank");
    }
    MS_ASSIGN_OR_RETURN(Tensor values,
                        Tensor::CreateUninitialized(held->second.dtype, box.shape()));
    MS_ASSIGN_OR_RETURN(BoxTensor tensor, BoxTensor::Wrap(box, std::move(values)));
    boxes->emplace_back(fill.param, std::move(tensor));
  }
  std::vector<std::pair<int64_t, std::function<absl::Status()>>> jobs;
  for (size_t i = 0; i < request.fills.size(); ++i) {
    const ParamPieceIr& fill = request.fills[i];
    PeerTransport* from = fill.src_worker == self_id ? self : transport;
    ReadParamIr read{request.model, fill.src_generation, fill.src_version, fill.param,
                     fill.box};
    jobs.emplace_back(fill.src_worker, [from, read = std::move(read), &fill, boxes, i,
                                        deadline, fetched, self_id]() {
      MS_ASSIGN_OR_RETURN(int64_t bytes, FetchBoxInto(from, fill.src_worker, read, deadline,
                                                      &(*boxes)[i].second));
      if (fill.src_worker != self_id) *fetched += bytes;
      return absl::OkStatus();
    });
  }
  return RunPerPeer(std::move(jobs));
}

}  // namespace

ModelStore::ModelStore(Options options, PeerTransport* transport)
    : options_(options),
      transport_(transport),
      worker_id_(options.worker_id),
      staging_(std::make_unique<ParamStore>()) {}

ModelStore::~ModelStore() = default;

std::shared_ptr<const LoadedModel> ModelStore::FindLocked(absl::string_view model,
                                                          int64_t generation,
                                                          int64_t version) const {
  auto it = models_.find(ModelKey(std::string(model), generation));
  if (it == models_.end() || it->second.empty()) return nullptr;
  if (version == 0) return it->second.rbegin()->second;
  auto v = it->second.find(version);
  return v == it->second.end() ? nullptr : v->second;
}

std::shared_ptr<const LoadedModel> ModelStore::Find(absl::string_view model, int64_t generation,
                                                    int64_t version) const {
  absl::MutexLock lock(&mu_);
  return FindLocked(model, generation, version);
}

void ModelStore::ForgetKept(absl::string_view model, int64_t generation,
                            const std::string& cache_key) const {
  absl::MutexLock lock(&mu_);
  auto m = models_.find(ModelKey(std::string(model), generation));
  if (m == models_.end()) return;
  for (const auto& [version, loaded] : m->second) loaded->kept_params.Drop(cache_key);
}

absl::StatusOr<LoadModelResultIr> ModelStore::Load(const LoadModelIr& request) {
  LoadContext context;
  context.worker_id = worker_id();
  context.transport = transport_;
  context.read_timeout = options_.param_read_timeout;
  context.find_resident = [this, &request](int64_t generation, int64_t version) {
    return Find(request.model, generation, version);
  };
  MS_ASSIGN_OR_RETURN(BuiltModel built, BuildLoadedModel(request, context));
  int64_t expected = -1;
  worker_id_.compare_exchange_strong(expected, built.model->worker_id);
  MS_LOG(INFO) << "loaded " << built.model->Name() << " devices "
               << built.model->DevicesString() << " replicas "
               << built.model->replica_devices.size() << ": " << built.result.param_bytes
               << " param bytes (" << built.result.bytes_fetched << " fetched, "
               << built.result.bytes_local << " local)";
  absl::MutexLock lock(&mu_);
  models_[ModelKey(request.model, request.generation)][built.model->version] =
      std::move(built.model);
  return built.result;
}

absl::StatusOr<std::vector<int64_t>> ModelStore::Unload(absl::string_view model,
                                                        int64_t generation, int64_t version) {
  int64_t removed = staging_->Drop(model, generation, version);
  std::vector<int64_t> gone_generations;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = models_.begin(); it != models_.end();) {
      auto cur = it++;
      if (cur->first.first != model || (generation != -1 && cur->first.second != generation)) {
        continue;
      }
      Versions& versions = cur->second;
      for (auto v = versions.begin(); v != versions.end();) {
        if (version == 0 || v->first == version) {
          v = versions.erase(v);
          ++removed;
        } else {
          ++v;
        }
      }
      if (!versions.empty()) continue;
      gone_generations.push_back(cur->first.second);
      models_.erase(cur);
    }
  }
  // No stream can stage into a gone generation.
  if (!gone_generations.empty()) ForgetAborts(model, gone_generations);
  if (removed == 0) {
    return NotFound("model '", model, "' generation ", generation, " version ", version,
                    " is not loaded here");
  }
  return gone_generations;
}

void ModelStore::ForgetAborts(absl::string_view model, const std::vector<int64_t>& generations) {
  absl::WriterMutexLock stage(&stage_mu_);
  for (auto it = aborted_at_.begin(); it != aborted_at_.end();) {
    auto cur = it++;
    if (std::get<0>(cur->first) == model &&
        absl::c_linear_search(generations, std::get<1>(cur->first))) {
      aborted_at_.erase(cur);
    }
  }
}

std::vector<HostedModelIr> ModelStore::Hosted() const {
  std::vector<HostedModelIr> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, versions] : models_) {
    for (const auto& [version, model] : versions) {
      HostedModelIr hosted;
      hosted.model = model->model;
      hosted.generation = model->generation;
      hosted.devices = model->devices;
      hosted.param_bytes = model->param_bytes;
      hosted.version = model->version;
      hosted.replica_devices = model->replica_devices;
      hosted.mesh = MeshToIr(model->mesh);
      hosted.device_workers = model->device_workers;
      out.push_back(std::move(hosted));
    }
  }
  return out;
}

absl::StatusOr<ParamBytes> ModelStore::ReadParam(const ReadParamIr& request) const {
  const std::string what = absl::StrCat("model '", request.model, "' generation ",
                                        request.generation, " version ", request.version);
  std::shared_ptr<const LoadedModel> model =
      Find(request.model, request.generation, request.version);
  if (model == nullptr) {
    const ParamStore::Key key(request.model, request.generation, request.version);
    if (request.version != 0 && staging_->Contains(key)) {
      absl::StatusOr<ParamBytes> staged = staging_->Read(key, request.param, request.box);
      if (staged.ok() || staging_->Contains(key)) return staged;
    }
    // A CommitParams may have moved the version from staging to resident
    // between the two looks (a peer's commit fill reads it meanwhile).
    model = Find(request.model, request.generation, request.version);
    if (model == nullptr) {
      return NotFound(what, " is neither resident nor being staged on worker ", worker_id());
    }
  }
  auto held = model->held.find(request.param);
  if (held == model->held.end()) {
    return NotFound(model->Name(), " has no param '", request.param, "'");
  }
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(request.box), "param '", request.param, "'");
  if (box.rank() != static_cast<int>(held->second.shape.size())) {
    return InvalidArgument("box ", box.ToString(), " of param '", request.param,
                           "' has the wrong rank for shape ",
                           ShapeToString(held->second.shape));
  }
  const int i = held->second.CellContaining(box);
  if (i < 0) {
    return OutOfRange("box ", box.ToString(), " of param '", request.param, "' of ",
                      model->Name(), " is not inside one held cell of worker ", worker_id(),
                      " (held: ", held->second.CellsString(), ")");
  }
  return CellBytes(held->second.cells[i], box);
}

int64_t ModelStore::StagingEpoch() const {
  absl::ReaderMutexLock lock(&stage_mu_);
  return staging_epoch_;
}

absl::StatusOr<int64_t> ModelStore::StageParams(const StageChunkIr& chunk, int64_t stream_epoch) {
  if (chunk.version <= 0) return InvalidArgument("stage into version ", chunk.version);
  absl::ReaderMutexLock stage(&stage_mu_);
  if (stream_epoch >= 0) {
    auto aborted = aborted_at_.find(std::make_tuple(chunk.model, chunk.generation, chunk.version));
    if (aborted != aborted_at_.end() && aborted->second > stream_epoch) {
      return absl::AbortedError(absl::StrCat(
          "staging of model '", chunk.model, "' generation ", chunk.generation, " version ",
          chunk.version, " was aborted while this stream was open"));
    }
  }
  std::shared_ptr<const LoadedModel> newest;
  {
    absl::MutexLock lock(&mu_);
    newest = FindLocked(chunk.model, chunk.generation, 0);
    if (newest == nullptr) {
      return NotFound("model '", chunk.model, "' generation ", chunk.generation,
                      " is not resident on worker ", worker_id());
    }
    if (FindLocked(chunk.model, chunk.generation, chunk.version) != nullptr) {
      return AlreadyExists("model '", chunk.model, "' generation ", chunk.generation,
                           " version ", chunk.version, " is already resident");
    }
  }
  return staging_->Stage(chunk, std::move(newest));
}

absl::StatusOr<CommitResultIr> ModelStore::CommitParams(const CommitParamsIr& request) {
  const ParamStore::Key key(request.model, request.generation, request.version);
  const std::string what = absl::StrCat("commit of model '", request.model, "' generation ",
                                        request.generation, " version ", request.version);
  if (request.version <= 0) return InvalidArgument(what, ": version must be > 0");
  std::shared_ptr<const LoadedModel> base =
      Find(request.model, request.generation, request.base_version);
  if (base == nullptr) {
    return NotFound(what, ": base version ", request.base_version, " is not resident");
  }
  if (std::shared_ptr<const LoadedModel> done =
          Find(request.model, request.generation, request.version)) {
    if (staging_->Contains(key)) return AlreadyExists(what, ": the version is resident");
    return CommitResultIr{done->param_bytes, 0};  // a retry of a commit that succeeded
  }
  // The fills: each into its own box, then staged all at once.
  SelfReader self(this);
  std::vector<std::pair<std::string, BoxTensor>> boxes;
  std::atomic<int64_t> fetched{0};
  MS_RETURN_IF_ERROR(FetchFills(request, *base, worker_id(), &self, transport_,
                                absl::Now() + options_.param_read_timeout, &boxes, &fetched),
                     what);
  if (!boxes.empty()) MS_RETURN_IF_ERROR(staging_->StageBoxes(key, base, std::move(boxes)), what);
  absl::MutexLock lock(&mu_);
  if (FindLocked(request.model, request.generation, request.version) != nullptr) {
    return AlreadyExists(what, ": the version became resident meanwhile");
  }
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> built,
                      staging_->Commit(key, *base, request.version, request.params));
  const CommitResultIr result{built->param_bytes, fetched.load()};
  MS_LOG(INFO) << "committed " << built->Name() << " on base version " << base->version
               << ": " << result.param_bytes << " param bytes, " << result.bytes_fetched
               << " fetched";
  models_[ModelKey(request.model, request.generation)][request.version] = std::move(built);
  return result;
}

absl::Status ModelStore::AbortParams(absl::string_view model, int64_t generation,
                                     int64_t version) {
  if (version <= 0) return InvalidArgument("abort of version ", version);
  {
    absl::WriterMutexLock stage(&stage_mu_);
    aborted_at_[std::make_tuple(std::string(model), generation, version)] = ++staging_epoch_;
    staging_->Drop(model, generation, version);
  }
  absl::MutexLock lock(&mu_);
  auto it = models_.find(ModelKey(std::string(model), generation));
  if (it != models_.end()) {
    it->second.erase(version);
    if (it->second.empty()) models_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace meshserve
