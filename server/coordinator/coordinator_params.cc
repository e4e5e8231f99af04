// Coordinator: parameter pushes (the commit and switch of a ParamPush,
// param_push.h) and pulls (see coordinator.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/coordinator.h"

namespace meshserve {
namespace {

constexpr int64_t kPullChunkBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<ParamPush>> Coordinator::BeginPush(const std::string& name) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> model, ServableModel(name));
  PushTarget target;
  {
    absl::MutexLock lock(&mu_);
    ModelEntry& entry = models_.at(name);
    if (entry.placement == nullptr) {
      return Unavailable("model '", name, "' is not placed yet: nothing to push to");
    }
    if (entry.push_in_progress) {
      return absl::AbortedError(absl::StrCat("a push to model ", name, " is in progress"));
    }
    if (pushes_in_progress_ >= options_.max_concurrent_pushes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "push to model '", name, "': ", pushes_in_progress_,
          " pushes in progress, the cluster's limit (--max_concurrent_pushes=",
          options_.max_concurrent_pushes, "); retry later"));
    }
    ++pushes_in_progress_;
    entry.push_in_progress = true;
    target.placement = entry.placement;
  }
  target.model = std::move(model);
  std::shared_ptr<const Placement> at = target.placement;
  target.client = [this, at](int64_t id) -> absl::StatusOr<std::shared_ptr<WorkerClient>> {
    auto addr = at->worker_addresses.find(id);
    if (addr == at->worker_addresses.end()) return Internal("worker ", id, " not placed");
    return Client(id, addr->second);
  };
  target.timeout = options_.load_timeout;
  target.control_timeout = options_.control_timeout;
  target.commit_and_switch = [this, name, at](const std::function<absl::Status()>& commit) {
    return CommitPush(name, at, commit);
  };
  target.release = [this, name] {
    {
      absl::MutexLock lock(&mu_);
      models_.at(name).push_in_progress = false;
      --pushes_in_progress_;
    }
    WakeControl();
  };
  return std::make_unique<ParamPush>(std::move(target));
}

absl::Status Coordinator::CommitPush(const std::string& name,
                                     const std::shared_ptr<const Placement>& at,
                                     const std::function<absl::Status()>& commit) {
  // No placement happens between the check and the switch: PlaceModel runs
  // under control_mu_ too.
  absl::MutexLock control(&control_mu_);
  auto moved = [&] {
    return absl::AbortedError(
        absl::StrCat("model ", name, ": membership changed during the push; nothing changed"));
  };
  {
    absl::MutexLock lock(&mu_);
    const ModelEntry& entry = models_.at(name);
    if (entry.placement != at) return moved();
    for (const auto& [id, address] : at->worker_addresses) {
      if (!registry_.IsAlive(id)) return moved();
    }
  }
  MS_RETURN_IF_ERROR(commit());
  auto next = std::make_shared<Placement>(*at);
  next->version = at->version + 1;
  absl::MutexLock lock(&mu_);
  ModelEntry& entry = models_.at(name);
  retired_.push_back(entry.placement);
  entry.placement = std::move(next);
  entry.pushed = true;
  MS_LOG(INFO) << "model '" << name << "' now serves version " << entry.placement->version
               << " (generation " << entry.placement->generation << ")";
  return absl::OkStatus();
}

absl::Status Coordinator::PullParams(const std::string& name,
                                     const std::vector<std::string>& names,
                                     const std::function<absl::Status(PullChunk)>& sink) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> model, ServableModel(name));
  // Pinned: the version cannot be unloaded while it is read.
  std::shared_ptr<const Placement> p = CurrentPlacement(name);
  if (p == nullptr) return Unavailable("model '", name, "' is not placed yet");
  std::vector<const ParamDef*> params;
  for (const std::string& n : names) {
    const ParamDef* param = model->FindParam(n);
    if (param == nullptr) return NotFound("model '", name, "' has no param '", n, "'");
    params.push_back(param);
  }
  if (names.empty()) {
    for (const ParamDef& param : model->params) params.push_back(&param);
  }
  for (const ParamDef* param : params) {
    const int64_t elem = DTypeSize(param->dtype);
    std::string full(static_cast<size_t>(Box::FromShape(param->shape).NumElements() * elem),
                     '\0');
    MS_ASSIGN_OR_RETURN(std::vector<CellHolders> cells, PlacementCells(*param, *p));
    for (const CellHolders& cell : cells) {
      if (cell.box.IsEmpty()) continue;  // an uneven sharding's empty shard
      std::vector<int64_t> holders = cell.primaries;
      holders.insert(holders.end(), cell.replicas.begin(), cell.replicas.end());
      absl::Status last = Unavailable("param '", param->name, "' box ", cell.box.ToString(),
                                      ": no live holder");
      bool read = false;
      for (int64_t id : holders) {
        if (!registry_.IsAlive(id)) continue;
        absl::StatusOr<std::shared_ptr<WorkerClient>> client =
            Client(id, p->worker_addresses.at(id));
        absl::StatusOr<std::string> bytes =
            client.ok() ? (*client)->ReadParam({p->model, p->generation, p->version,
                                                param->name, BoxToIr(cell.box)},
                                               options_.load_timeout)
                        : client.status();
        if (bytes.ok() && static_cast<int64_t>(bytes->size()) != cell.box.NumElements() * elem) {
          bytes = Internal("worker ", id, " returned ", bytes->size(), " bytes for box ",
                           cell.box.ToString(), " of param '", param->name, "'");
        }
        if (!bytes.ok()) {
          last = AnnotateStatus(bytes.status(), "ReadParam on worker ", id);
          continue;
        }
        MS_RETURN_IF_ERROR(InsertBoxBytes(full.data(), param->shape, elem, cell.box,
                                          bytes->data()),
                           "param '", param->name, "'");
        read = true;
        break;
      }
      if (!read) return last;
    }
    const int64_t total = static_cast<int64_t>(full.size());
    for (int64_t offset = 0; offset < total || offset == 0; offset += kPullChunkBytes) {
      PullChunk chunk;
      chunk.param = param->name;
      chunk.byte_offset = offset;
      chunk.data = full.substr(static_cast<size_t>(offset), static_cast<size_t>(kPullChunkBytes));
      if (offset == 0) {
        chunk.shape = param->shape;
        chunk.dtype = DTypeToProto(param->dtype);
        chunk.total_bytes = total;
        chunk.version = p->version;
      }
      MS_RETURN_IF_ERROR(sink(std::move(chunk)));
      if (total == 0) break;
    }
  }
  return absl::OkStatus();
}

}  // namespace meshserve
