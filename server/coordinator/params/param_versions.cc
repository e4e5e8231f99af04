// ParamVersions (param_versions.h): a push's admission and its commit through
// PlacementManager::CommitVersion; a pull reads each cell of a param from one
// live holder and streams the assembled bytes in chunks.
#include "server/coordinator/params/param_versions.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/params/param_moves.h"

namespace meshserve {
namespace {

constexpr int64_t kPullChunkBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<ParamPush>> ParamVersions::BeginPush(const std::string& name,
                                                                     absl::Time deadline) {
  PushTarget target;
  MS_ASSIGN_OR_RETURN(target.model, placements_->ServableModel(name));
  std::shared_ptr<const Placement> current = placements_->CurrentPlacement(name);
  if (current == nullptr) {
    return Unavailable("model '", name, "' is not placed yet: nothing to push to");
  }
  // The push reads a copy and pins the placement (no unload while it stages)
  // with exactly one reference, `at` in `client`: the version bound leaves
  // that pin out (PlacementManager::CommitVersion).
  target.placement = std::make_shared<const Placement>(*current);
  const std::weak_ptr<const Placement> weak = current;
  {
    absl::MutexLock lock(&mu_);
    if (pushing_.count(name) > 0) {
      return absl::AbortedError(absl::StrCat("a push to model ", name, " is in progress"));
    }
    if (static_cast<int>(pushing_.size()) >= options_.max_concurrent_pushes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("push to model '", name, "': ", pushing_.size(),
                       " pushes in progress, the cluster's limit (--max_concurrent_pushes=",
                       options_.max_concurrent_pushes, "); retry later"));
    }
    pushing_.insert(name);
  }
  target.client = [this, at = std::move(current)](
                      int64_t id) -> absl::StatusOr<std::shared_ptr<WorkerClient>> {
    auto addr = at->worker_addresses.find(id);
    if (addr == at->worker_addresses.end()) return Internal("worker ", id, " not placed");
    return connections_->Get(id, addr->second);
  };
  target.timeout = options_.load_timeout;
  target.control_timeout = options_.control_timeout;
  target.commit_and_switch = [this, name, weak, deadline](
                                  const std::function<absl::Status()>& commit, absl::Time call) {
    const absl::Time first = std::min(deadline, call);
    const absl::Time until =
        first == absl::InfiniteFuture() ? absl::Now() + options_.load_timeout : first;
    return placements_->CommitVersion(name, weak, commit, until);
  };
  target.release = [this, name] {
    {
      absl::MutexLock lock(&mu_);
      pushing_.erase(name);
    }
    pushed_();
  };
  return std::make_unique<ParamPush>(std::move(target));
}

absl::StatusOr<std::string> ParamVersions::ReadParam(const ParamDef& param, const Placement& p) {
  const int64_t elem = DTypeSize(param.dtype);
  std::string full(static_cast<size_t>(Box::FromShape(param.shape).NumElements() * elem), '\0');
  MS_ASSIGN_OR_RETURN(std::vector<CellHolders> cells, PlacementCells(param, p));
  for (const CellHolders& cell : cells) {
    if (cell.box.IsEmpty()) continue;  // an uneven sharding's empty shard
    std::vector<int64_t> holders = cell.primaries;
    holders.insert(holders.end(), cell.replicas.begin(), cell.replicas.end());
    absl::Status last =
        Unavailable("param '", param.name, "' box ", cell.box.ToString(), ": no live holder");
    bool read = false;
    for (int64_t id : holders) {
      if (!registry_->IsAlive(id)) continue;
      absl::StatusOr<std::shared_ptr<WorkerClient>> client =
          connections_->Get(id, p.worker_addresses.at(id));
      absl::StatusOr<std::string> bytes =
          client.ok() ? (*client)->ReadParam(
                            {p.model, p.generation, p.version, param.name, BoxToIr(cell.box)},
                            options_.load_timeout)
                      : client.status();
      if (bytes.ok() && static_cast<int64_t>(bytes->size()) != cell.box.NumElements() * elem) {
        bytes = Internal("worker ", id, " returned ", bytes->size(), " bytes for box ",
                         cell.box.ToString(), " of param '", param.name, "'");
      }
      if (!bytes.ok()) {
        last = AnnotateStatus(bytes.status(), "ReadParam on worker ", id);
        continue;
      }
      MS_RETURN_IF_ERROR(InsertBoxBytes(full.data(), param.shape, elem, cell.box, bytes->data()),
                         "param '", param.name, "'");
      read = true;
      break;
    }
    if (!read) return last;
  }
  return full;
}

absl::Status ParamVersions::PullParams(const std::string& name,
                                       const std::vector<std::string>& names,
                                       const std::function<absl::Status(PullChunk)>& sink) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> model, placements_->ServableModel(name));
  // Pinned: the version cannot be unloaded while it is read.
  std::shared_ptr<const Placement> p = placements_->CurrentPlacement(name);
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
    MS_ASSIGN_OR_RETURN(std::string full, ReadParam(*param, *p));
    const int64_t total = static_cast<int64_t>(full.size());
    for (int64_t offset = 0; offset < total || offset == 0; offset += kPullChunkBytes) {
      PullChunk chunk;
      chunk.param = param->name;
      chunk.byte_offset = offset;
      chunk.data = full.substr(static_cast<size_t>(offset), static_cast<size_t>(kPullChunkBytes));
      if (offset == 0) {
        chunk.shape = param->shape;
        chunk.dtype = param->dtype;
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
