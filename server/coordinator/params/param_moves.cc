#include "server/coordinator/params/param_moves.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/shard_layout.h"

namespace meshserve {
namespace {

// An old cell and its live holders.
struct OldCell {
  Box box;
  std::vector<const ParamHolding*> holders;
};

std::vector<int64_t> Union(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

int64_t Volume(const std::vector<Box>& boxes) {
  int64_t n = 0;
  for (const Box& b : boxes) n += b.NumElements();
  return n;
}

// The pieces of one new cell, built by covering what remains of it.
class CellCover {
 public:
  CellCover(const ParamDef& param, const Box& cell) : param_(param), remaining_{cell} {}
  // Covers remaining ∩ box from `holder`; returns the elements covered.
  int64_t Cover(const Box& box, const ParamHolding& holder) {
    std::vector<Box> rest;
    int64_t covered = 0;
    for (const Box& r : remaining_) {
      Box piece = Intersect(r, box);
      if (piece.IsEmpty()) {
        rest.push_back(r);
        continue;
      }
      covered += piece.NumElements();
      pieces_.push_back(ParamPieceIr{param_.name, BoxToIr(piece), holder.worker_id,
                                     holder.generation, holder.version});
      std::vector<Box> left = SubtractBox(r, box);
      rest.insert(rest.end(), left.begin(), left.end());
    }
    remaining_ = std::move(rest);
    return covered;
  }
  bool Meets(const Box& box) const {
    for (const Box& r : remaining_) {
      if (!Intersect(r, box).IsEmpty()) return true;
    }
    return false;
  }
  bool done() const { return Volume(remaining_) == 0; }
  const std::vector<Box>& remaining() const { return remaining_; }
  std::vector<ParamPieceIr>& pieces() { return pieces_; }

 private:
  const ParamDef& param_;
  std::vector<Box> remaining_;
  std::vector<ParamPieceIr> pieces_;
};

absl::Status LostError(const ParamDef& param, const Box& lost,
                       const std::vector<ParamHolding>& old) {
  int64_t version = 1;
  for (const ParamHolding& h : old) version = std::max(version, h.version);
  for (const ParamHolding& h : old) {
    if (h.live) continue;
    absl::StatusOr<std::vector<Box>> cells =
        HeldCells(param, h.mesh, Union(h.devices, h.replica_devices));
    if (!cells.ok()) continue;
    for (const Box& cell : *cells) {
      if (Intersect(cell, lost).IsEmpty()) continue;
      return absl::DataLossError(absl::StrCat("param ", param.name, " box ", cell.ToString(),
                                              " lost with worker ", h.worker_id, "; version ",
                                              h.version, " cannot be rebuilt"));
    }
  }
  return absl::DataLossError(absl::StrCat("param ", param.name, " box ", lost.ToString(),
                                          " has no live holder; version ", version,
                                          " cannot be rebuilt"));
}

}  // namespace

absl::StatusOr<std::vector<Box>> HeldCells(const ParamDef& param, const Mesh& mesh,
                                           const std::vector<int64_t>& devices) {
  MS_ASSIGN_OR_RETURN(
      NamedSharding sharding,
      NamedSharding::Create(mesh, param.sharding, static_cast<int>(param.shape.size())),
      "param '", param.name, "' on ", mesh.ToString());
  std::vector<Box> cells;
  for (int64_t d : devices) {
    MS_ASSIGN_OR_RETURN(Box box, CheckedShardBoxForDevice(param.shape, sharding, d),
                        "param '", param.name, "'");
    cells.push_back(std::move(box));
  }
  std::sort(cells.begin(), cells.end());
  cells.erase(std::unique(cells.begin(), cells.end()), cells.end());
  return cells;
}

std::vector<ParamHolding> HoldingsOf(const Placement& placement) {
  std::vector<ParamHolding> out;
  for (const auto& [id, devices] : placement.devices_by_worker) {
    out.push_back(ParamHolding{id, placement.generation, placement.version, placement.mesh,
                               devices, placement.ReplicaDevices(id), true});
  }
  return out;
}

absl::StatusOr<std::vector<CellHolders>> PlacementCells(const ParamDef& param,
                                                        const Placement& placement) {
  std::map<Box, CellHolders> by_box;
  for (const auto& [id, devices] : placement.devices_by_worker) {
    MS_ASSIGN_OR_RETURN(std::vector<Box> primary, HeldCells(param, placement.mesh, devices));
    for (const Box& b : primary) by_box[b].primaries.push_back(id);
    MS_ASSIGN_OR_RETURN(std::vector<Box> replica,
                        HeldCells(param, placement.mesh, placement.ReplicaDevices(id)));
    for (const Box& b : replica) {
      if (!std::binary_search(primary.begin(), primary.end(), b)) {
        by_box[b].replicas.push_back(id);
      }
    }
  }
  std::vector<CellHolders> out;
  for (auto& [box, holders] : by_box) {
    holders.box = box;
    out.push_back(std::move(holders));
  }
  return out;
}

absl::StatusOr<ParamMovePlan> PlanParamMoves(const ModelFile& model,
                                             const std::vector<ParamHolding>& old,
                                             const Placement& next, bool pushed) {
  ParamMovePlan plan;
  for (int64_t id : next.WorkerIds()) plan.sources[id];
  std::map<int64_t, int64_t> served;  // bytes read from each source worker
  for (const ParamDef& param : model.params) {
    const int64_t elem = DTypeSize(param.dtype);
    std::vector<OldCell> old_cells;  // distinct boxes, in holding order
    for (const ParamHolding& h : old) {
      if (!h.live) continue;
      MS_ASSIGN_OR_RETURN(std::vector<Box> cells,
                          HeldCells(param, h.mesh, Union(h.devices, h.replica_devices)),
                          "holding of worker ", h.worker_id);
      for (const Box& cell : cells) {
        auto it = std::find_if(old_cells.begin(), old_cells.end(),
                               [&](const OldCell& c) { return c.box == cell; });
        if (it == old_cells.end()) it = old_cells.insert(old_cells.end(), OldCell{cell, {}});
        it->holders.push_back(&h);
      }
    }
    for (auto& [id, sources] : plan.sources) {
      MS_ASSIGN_OR_RETURN(
          std::vector<Box> cells,
          HeldCells(param, next.mesh,
                    Union(next.devices_by_worker.at(id), next.ReplicaDevices(id))));
      for (const Box& cell : cells) {
        CellCover cover(param, cell);
        int64_t local = 0;
        for (const OldCell& oc : old_cells) {
          for (const ParamHolding* h : oc.holders) {
            if (h->worker_id != id) continue;
            local += cover.Cover(oc.box, *h);
            break;
          }
        }
        std::map<int64_t, int64_t> cell_served;
        int64_t remote = 0;
        for (const OldCell& oc : old_cells) {
          if (cover.done()) break;
          if (!cover.Meets(oc.box)) continue;
          const ParamHolding* best = nullptr;
          for (const ParamHolding* h : oc.holders) {
            auto load = [&](const ParamHolding* x) {
              return std::make_pair(served[x->worker_id] + cell_served[x->worker_id],
                                    x->worker_id);
            };
            if (best == nullptr || load(h) < load(best)) best = h;
          }
          const int64_t n = cover.Cover(oc.box, *best);
          cell_served[best->worker_id] += n * elem;
          remote += n;
        }
        if (!cover.done()) {
          if (pushed) return LostError(param, cover.remaining().front(), old);
          plan.stats.bytes_initialized += cell.NumElements() * elem;
          continue;
        }
        for (const auto& [w, bytes] : cell_served) served[w] += bytes;
        plan.stats.bytes_local += local * elem;
        plan.stats.bytes_moved += remote * elem;
        plan.stats.lower_bound_bytes += (cell.NumElements() - local) * elem;
        for (ParamPieceIr& piece : cover.pieces()) sources.push_back(std::move(piece));
      }
    }
  }
  return plan;
}

}  // namespace meshserve
