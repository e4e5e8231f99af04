#include "server/coordinator/testing/fake_worker_client.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <variant>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"
#include "server/coordinator/params/param_moves.h"

namespace meshserve {

absl::Status FakeWorkerClient::CheckUp() const {
  if (down_) return Unavailable("fake worker ", worker_id_, " is down");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<FakeWorkerClient>> FakeWorkerClient::Peer(
    int64_t worker_id) const {
  if (!peers_) return FailedPrecondition("fake worker ", worker_id_, " has no peers");
  std::shared_ptr<FakeWorkerClient> peer = peers_(worker_id);
  if (peer == nullptr) return Unavailable("fake worker ", worker_id, " unknown");
  return peer;
}

absl::StatusOr<std::string> FakeWorkerClient::ReadPeer(const std::string& model,
                                                        const ParamPieceIr& piece) const {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<FakeWorkerClient> peer, Peer(piece.src_worker));
  absl::StatusOr<std::string> bytes = peer->ReadParam(
      {model, piece.src_generation, piece.src_version, piece.param, piece.box},
      absl::ZeroDuration());
  if (!bytes.ok()) return AnnotateStatus(bytes.status(), "from worker ", piece.src_worker);
  return bytes;
}

const FakeWorkerClient::Resident* FakeWorkerClient::AnyResident(const std::string& model,
                                                                int64_t generation) const {
  for (const auto& [key, r] : residents_) {
    if (std::get<0>(key) == model && std::get<1>(key) == generation) return &r;
  }
  return nullptr;
}

absl::StatusOr<LoadModelResultIr> FakeWorkerClient::LoadModel(const LoadModelIr& call,
                                                              absl::Duration) {
  MS_ASSIGN_OR_RETURN(ModelFile file, ParseModelFile(call.model_json, call.model_dir));
  MS_ASSIGN_OR_RETURN(Mesh mesh, MeshFromIr(call.mesh));
  Resident r;
  r.load = call;
  r.load.model_json.clear();
  if (r.load.version == 0) r.load.version = 1;
  r.model = std::make_shared<const ModelFile>(std::move(file));
  std::vector<int64_t> held = call.devices;
  held.insert(held.end(), call.replica_devices.begin(), call.replica_devices.end());
  using CellKey = std::pair<std::string, Box>;
  std::map<CellKey, std::vector<std::pair<Box, std::string>>> got;
  std::vector<std::pair<CellKey, ParamPieceIr>> remote;
  LoadModelResultIr result;
  {
    absl::MutexLock lock(&mu_);
    MS_RETURN_IF_ERROR(CheckUp());
    load_calls_.push_back(r.load);
    auto failure = load_failures_.find(call.model);
    if (failure != load_failures_.end()) return failure->second;
    for (int64_t d : call.devices) {
      if (d < 0 || d >= static_cast<int64_t>(call.device_workers.size()) ||
          call.device_workers[d] != worker_id_) {
        return InvalidArgument("fake worker ", worker_id_, ": device ", d, " is not mine");
      }
    }
    for (const ParamDef& param : r.model->params) {
      MS_ASSIGN_OR_RETURN(std::vector<Box> cells, HeldCells(param, mesh, held));
      for (const Box& cell : cells) {
        r.cells[param.name][cell] = nullptr;
        for (const ParamPieceIr& piece : call.sources) {
          MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(piece.box));
          if (piece.param != param.name || Intersect(box, cell).IsEmpty()) continue;
          if (!cell.Contains(box)) {
            return InvalidArgument("fake worker ", worker_id_, ": source box ",
                                   box.ToString(), " of param '", param.name,
                                   "' crosses cell ", cell.ToString());
          }
          if (piece.src_worker != worker_id_) {
            if (!call.worker_addresses.count(piece.src_worker)) {
              return InvalidArgument("fake worker ", worker_id_, ": source worker ",
                                     piece.src_worker, " has no address");
            }
            remote.push_back({{param.name, cell}, piece});
            continue;
          }
          auto src = residents_.find({call.model, piece.src_generation, piece.src_version});
          if (src == residents_.end()) {
            return FailedPrecondition("fake worker ", worker_id_, ": local source generation ",
                                      piece.src_generation, " version ", piece.src_version,
                                      " not resident");
          }
          MS_ASSIGN_OR_RETURN(std::string bytes, ReadCells(src->second, param.name, box));
          result.bytes_local += static_cast<int64_t>(bytes.size());
          got[{param.name, cell}].push_back({box, std::move(bytes)});
        }
      }
    }
  }
  for (auto& [key, piece] : remote) {
    MS_ASSIGN_OR_RETURN(std::string bytes, ReadPeer(call.model, piece), "source");
    result.bytes_fetched += static_cast<int64_t>(bytes.size());
    got[key].push_back({UncheckedBoxFromIr(piece.box), std::move(bytes)});
  }
  for (auto& [name, cells] : r.cells) {
    const ParamDef& param = *r.model->FindParam(name);
    for (auto& [cell, bytes] : cells) {
      auto pieces = got.find({name, cell});
      if (pieces == got.end()) {
        bytes = std::make_shared<const std::string>(FakeParamBytes(param, cell));
        continue;
      }
      MS_ASSIGN_OR_RETURN(std::string assembled, Assemble(param, cell, pieces->second));
      bytes = std::make_shared<const std::string>(std::move(assembled));
    }
  }
  result.param_bytes = ResidentBytes(r);
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  residents_[{call.model, call.generation, r.load.version}] = std::move(r);
  return result;
}

absl::Status FakeWorkerClient::UnloadModel(const std::string& model, int64_t generation,
                                           int64_t version, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  for (auto it = residents_.begin(); it != residents_.end();) {
    const auto& [m, g, v] = it->first;
    const bool match = m == model && (generation < 0 || g == generation) &&
                       (version == 0 || v == version);
    it = match ? residents_.erase(it) : std::next(it);
  }
  unloaded_.push_back({model, generation, version});
  return absl::OkStatus();
}

absl::Status FakeWorkerClient::InstallProgram(const ProgramIr& program, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  ++install_calls_;
  if (AnyResident(program.model, program.generation) == nullptr) {
    return FailedPrecondition("fake worker ", worker_id_, ": model '", program.model,
                              "' generation ", program.generation, " not loaded");
  }
  programs_[program.program_id] = program;
  return absl::OkStatus();
}

absl::Status FakeWorkerClient::UninstallProgram(const std::string& program_id, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  uninstalled_.push_back(program_id);
  if (programs_.erase(program_id) == 0) {
    return NotFound("fake worker ", worker_id_, ": unknown program '", program_id, "'");
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecuteResult> FakeWorkerClient::Execute(ExecuteCall call,
                                                        absl::Duration) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    MS_RETURN_IF_ERROR(CheckUp());
    ++execute_calls_;
    param_cache_modes_.push_back(call.param_cache);
    if (call.decode != nullptr) decode_steps_.push_back(*call.decode);
    if (!execute_failure_.ok()) {
      absl::Status failure = execute_failure_;
      if (execute_failures_left_ > 0 && --execute_failures_left_ == 0) {
        execute_failure_ = absl::OkStatus();
      }
      return failure;
    }
    delay = execute_delay_;
    max_running_ = std::max(max_running_, ++running_);
  }
  absl::SleepFor(delay);
  absl::MutexLock lock(&mu_);
  --running_;
  MS_RETURN_IF_ERROR(CheckUp());
  std::map<std::pair<int64_t, std::string>, BoxTensor> inputs;
  for (const SliceIr& s : call.inputs) {
    MS_ASSIGN_OR_RETURN(BoxTensor t, BoxTensorFromSlice(s));
    inputs[{s.device, InputBuffer(s.name)}] = std::move(t);
  }
  ExecuteResult result;
  auto program = programs_.find(call.program_id);
  if (program == programs_.end()) {
    return NotFound("fake worker ", worker_id_, ": unknown program '", call.program_id, "'");
  }
  const ProgramIr& p = program->second;
  const Resident* resident = nullptr;  // the version asked for (0: newest)
  for (const auto& [key, r] : residents_) {
    const auto& [m, g, v] = key;
    if (m == p.model && g == p.generation && (call.param_version == 0 || v == call.param_version)) {
      resident = &r;
    }
  }
  if (resident == nullptr) {
    return FailedPrecondition("fake worker ", worker_id_, ": model '", p.model,
                              "' generation ", p.generation, " version ", call.param_version,
                              " not resident");
  }
  // Only Output steps: each returns a box of an input buffer it was sent.
  for (const StepIr& step : p.steps) {
    const auto* output = std::get_if<OutputStepIr>(&step);
    if (output == nullptr) continue;
    auto in = inputs.find({output->device, output->buffer});
    if (in == inputs.end()) continue;
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(output->box));
    SliceIr out;
    out.name = output->output;
    out.device = output->device;
    out.box = output->box;
    out.dtype = in->second.tensor.dtype();
    MS_ASSIGN_OR_RETURN(out.data, ExtractBox(in->second, box));
    const ParamDef* offset = resident->model->FindParam("offset");
    if (offset != nullptr && offset->dtype == DType::kFloat32 &&
        in->second.tensor.dtype() == DType::kFloat32) {
      absl::StatusOr<std::string> add = ReadCells(*resident, "offset", box);
      if (add.ok() && add->size() == out.data.size()) {
        for (size_t i = 0; i < out.data.size(); i += 4) {
          float a, b;
          std::memcpy(&a, out.data.data() + i, 4);
          std::memcpy(&b, add->data() + i, 4);
          a += b;
          std::memcpy(out.data.data() + i, &a, 4);
        }
      }
    }
    result.outputs.push_back(std::move(out));
  }
  return result;
}

absl::Status FakeWorkerClient::ReleaseSequences(const std::string& model, int64_t generation,
                                                const std::vector<int64_t>& seqs,
                                                absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  if (release_unimplemented_) return absl::UnimplementedError("fake worker: no ReleaseSequences");
  released_.push_back({model, generation, seqs});
  return absl::OkStatus();
}

absl::Status FakeWorkerClient::Cancel(const std::string& request_id, const std::string&,
                                      absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  cancelled_.push_back(request_id);
  return absl::OkStatus();
}

absl::StatusOr<WorkerStatusIr> FakeWorkerClient::Status(absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  WorkerStatusIr result;
  result.worker_id = worker_id_;
  result.blas_core = "Fake";
  for (const auto& [key, r] : residents_) {
    HostedModelIr h;
    h.model = r.load.model;
    h.generation = r.load.generation;
    h.devices = r.load.devices;
    h.param_bytes = ResidentBytes(r);
    h.version = r.load.version;
    h.replica_devices = r.load.replica_devices;
    h.mesh = r.load.mesh;
    h.device_workers = r.load.device_workers;
    result.models.push_back(std::move(h));
  }
  result.programs = static_cast<int64_t>(programs_.size());
  return result;
}

void FakeWorkerClient::SetDown(bool down) {
  absl::MutexLock lock(&mu_);
  down_ = down;
}
void FakeWorkerClient::FailExecute(absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  execute_failure_ = times == 0 ? absl::OkStatus() : std::move(status);
  execute_failures_left_ = times;
}
void FakeWorkerClient::FailLoad(const std::string& model, absl::Status status) {
  absl::MutexLock lock(&mu_);
  load_failures_[model] = std::move(status);
}
void FakeWorkerClient::FailCommit(absl::Status status) {
  absl::MutexLock lock(&mu_);
  commit_failure_ = std::move(status);
}
void FakeWorkerClient::Restart() {
  absl::MutexLock lock(&mu_);
  residents_.clear();
  staging_.clear();
  programs_.clear();
}
void FakeWorkerClient::SetExecuteDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  execute_delay_ = delay;
}
std::vector<std::string> FakeWorkerClient::programs() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, program] : programs_) ids.push_back(id);
  return ids;
}
std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> FakeWorkerClient::loaded()
    const {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> out;
  for (const auto& [key, r] : residents_) out[{r.load.model, r.load.generation}] = r.load.devices;
  return out;
}
std::vector<std::pair<std::string, int64_t>> FakeWorkerClient::unloaded() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [m, g, v] : unloaded_) out.push_back({m, g});
  return out;
}
std::vector<int64_t> FakeWorkerClient::versions(const std::string& model,
                                                int64_t generation) const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> out;
  for (const auto& [key, r] : residents_) {
    if (std::get<0>(key) == model && std::get<1>(key) == generation) out.push_back(std::get<2>(key));
  }
  return out;
}

}  // namespace meshserve
