// ComputeReshardPlan (reshard_plan.h): the dispatcher, the plan's value
// helpers, and PlanTwoPhaseAllReduce (reduce-scatter then all-gather).
//
// Thread-safety: pure functions over values.
#include "common/sharding/reshard_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/sharding/reshard_strategies.h"

namespace meshserve {

std::vector<int64_t> OneWorkerPerDevice(const Mesh& mesh) {
  std::vector<int64_t> workers(mesh.num_devices());
  for (int64_t d = 0; d < mesh.num_devices(); ++d) workers[d] = d;
  return workers;
}

absl::string_view TransferKindName(TransferKind kind) {
  switch (kind) {
    case TransferKind::kCopy:
      return "copy";
    case TransferKind::kReduce:
      return "reduce";
    case TransferKind::kLocalCopy:
      return "local_copy";
    case TransferKind::kLocalForward:
      return "local_forward";
    case TransferKind::kForward:
      return "forward";
  }
  return "?";
}

bool IsNetworkTransfer(TransferKind kind) {
  return kind == TransferKind::kCopy || kind == TransferKind::kReduce ||
         kind == TransferKind::kForward;
}

int64_t Transfer::Bytes(DType dtype) const {
  return IsNetworkTransfer(kind) ? box.NumElements() * DTypeSize(dtype) : 0;
}

std::string Transfer::ToString() const {
  std::string out = absl::StrCat(TransferKindName(kind), " w", src_worker, "/d",
                                 src_device, " -> w", dst_worker, "/d", dst_device,
                                 " ", box.ToString());
  if (!src_addends.empty()) {
    absl::StrAppend(&out, " +d", absl::StrJoin(src_addends, ",d"));
  }
  return out;
}

void ReshardPlan::AddTransfer(TransferKind kind, int64_t src_device,
                              int64_t src_worker, int64_t dst_device, const Box& box,
                              absl::Span<const int64_t> src_addends) {
  const int64_t end = NumTransfers();
  group_dst_devices.push_back(static_cast<int32_t>(dst_device));
  if (!groups.empty()) {
    TransferGroup& last = groups.back();
    if (last.dst_end == end && last.kind == kind && last.src_device == src_device &&
        last.src_worker == src_worker && last.box == box &&
        absl::MakeConstSpan(last.src_addends) == src_addends) {
      last.dst_end = end + 1;
      return;
    }
  }
  groups.push_back(TransferGroup{kind, src_device, src_worker, box,
                                 {src_addends.begin(), src_addends.end()}, end,
                                 end + 1});
}

int64_t ReshardPlan::NumNetworkTransfers() const {
  int64_t n = 0;
  for (const TransferGroup& g : groups) n += IsNetworkTransfer(g.kind) ? g.size() : 0;
  return n;
}

Transfer ReshardPlan::GroupTransfer(const TransferGroup& g, int64_t i) const {
  const int64_t d = group_dst_devices[g.dst_begin + i];
  return Transfer{g.kind, g.src_device, g.src_worker, d, dst_workers[d], g.box,
                  g.src_addends};
}

std::vector<Transfer> ReshardPlan::Transfers() const {
  std::vector<Transfer> out;
  out.reserve(group_dst_devices.size());
  for (const TransferGroup& g : groups) {
    for (int64_t i = 0; i < g.size(); ++i) out.push_back(GroupTransfer(g, i));
  }
  return out;
}

namespace {

using reshard_internal::ReshardProblem;

// One worker of an all-reduce unit: its devices holding the unit's box.
struct UnitMember {
  int64_t worker = 0;
  uint64_t mask = 0;                  // partial indices held
  std::vector<int64_t> partial_devs;  // one device per held partial, by index
  std::vector<int64_t> devices;       // all its devices of the unit, ascending
};

// One shard tuple of an all-reduce: its box and the workers holding it.
struct AllReduceUnit {
  Box box;
  std::vector<UnitMember> members;  // by first device
};

// The units of an all-reduce whose workers hold disjoint partial sets, or
// nullopt when `p` is no such all-reduce (see "All-reduce" in reshard_plan.h).
std::optional<std::vector<AllReduceUnit>> AllReduceUnits(const ReshardProblem& p) {
  const PartitionSpec& from = p.src->sharding.spec();
  const PartitionSpec& to = p.dst->sharding.spec();
  if (!p.same_mesh_and_workers || p.num_partials < 2 || !to.unreduced().empty() ||
      from.entries() != to.entries()) {
    return std::nullopt;
  }
  std::map<int64_t, AllReduceUnit> by_tuple;
  const int64_t n = p.dst->sharding.mesh().num_devices();
  for (int64_t d = 0; d < n; ++d) {
    const int64_t tuple = p.dst_grid.device_shard()[d];
    AllReduceUnit& unit = by_tuple[tuple];
    unit.box = p.dst_grid.ShardBox(tuple);
    const int64_t w = p.dst->device_workers[d];
    auto it = std::find_if(unit.members.begin(), unit.members.end(),
                           [w](const UnitMember& m) { return m.worker == w; });
    if (it == unit.members.end()) {
      unit.members.push_back(UnitMember{w, 0, {}, {}});
      it = unit.members.end() - 1;
    }
    const uint64_t bit = uint64_t{1} << p.src_partial[d];
    if ((it->mask & bit) == 0) it->partial_devs.push_back(d);
    it->mask |= bit;
    it->devices.push_back(d);
  }
  std::vector<AllReduceUnit> units;
  for (auto& [tuple, unit] : by_tuple) {
    if (unit.box.IsEmpty()) continue;
    uint64_t seen = 0;
    for (const UnitMember& m : unit.members) {
      if ((seen & m.mask) != 0) return std::nullopt;  // a partial on two workers
      seen |= m.mask;
    }
    units.push_back(std::move(unit));
  }
  return units;
}

// The k (or fewer) chunks of `box` along its longest dim.
std::vector<Box> Chunks(const Box& box, int64_t k) {
  if (box.rank() == 0) return {box};
  int dim = 0;
  for (int i = 1; i < box.rank(); ++i) {
    if (box[i].size() > box[dim].size()) dim = i;
  }
  const int64_t extent = box[dim].size();
  const int64_t m = std::min(k, extent);
  std::vector<Box> chunks;
  for (int64_t c = 0; c < m; ++c) {
    Box chunk = box;
    chunk[dim] = Interval{box[dim].begin + extent * c / m,
                          box[dim].begin + extent * (c + 1) / m};
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

void AddPartials(ReshardPlan& plan, TransferKind kind, const UnitMember& from,
                 int64_t dst_device, const Box& box) {
  plan.AddTransfer(kind, from.partial_devs[0], from.worker, dst_device, box,
                   absl::MakeConstSpan(from.partial_devs).subspan(1));
}

std::optional<ReshardPlan> PlanTwoPhaseAllReduce(const ReshardProblem& p) {
  std::optional<std::vector<AllReduceUnit>> units = AllReduceUnits(p);
  if (!units.has_value()) return std::nullopt;
  ReshardPlan plan;
  plan.strategy = "PlanTwoPhaseAllReduce";
  plan.pattern = std::string(kTwoPhaseAllReducePattern);
  plan.dst_workers = p.dst->device_workers;
  const int64_t dtype_size = DTypeSize(p.dtype);
  for (const AllReduceUnit& u : *units) {  // round 1: reduce-scatter
    const int64_t k = static_cast<int64_t>(u.members.size());
    const std::vector<Box> chunks = Chunks(u.box, k);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const UnitMember& owner = u.members[c];
      AddPartials(plan, TransferKind::kLocalCopy, owner, owner.devices[0], chunks[c]);
      for (size_t i = 1; i < u.members.size(); ++i) {  // the others, after the owner
        const UnitMember& from = u.members[(c + i) % u.members.size()];
        AddPartials(plan, TransferKind::kReduce, from, owner.devices[0], chunks[c]);
      }
    }
    plan.lower_bound_bytes += 2 * (k - 1) * u.box.NumElements() * dtype_size;
  }
  for (const AllReduceUnit& u : *units) {  // round 2: all-gather
    const std::vector<Box> chunks = Chunks(u.box, static_cast<int64_t>(u.members.size()));
    for (size_t c = 0; c < chunks.size(); ++c) {
      const UnitMember& owner = u.members[c];
      for (const UnitMember& to : u.members) {
        if (to.worker == owner.worker) continue;
        plan.AddTransfer(TransferKind::kForward, owner.devices[0], owner.worker,
                         to.devices[0], chunks[c]);
      }
    }
  }
  for (const AllReduceUnit& u : *units) {  // the other devices of each worker
    for (const UnitMember& m : u.members) {
      for (size_t i = 1; i < m.devices.size(); ++i) {
        plan.AddTransfer(TransferKind::kLocalForward, m.devices[0], m.worker, m.devices[i],
                         u.box);
      }
    }
  }
  return plan;
}

// Fills bytes_moved, max_worker_bytes and num_rounds (`rounds` when the plan
// moves anything over the network).
void FillTraffic(ReshardPlan& plan, DType dtype, int64_t rounds) {
  absl::flat_hash_map<int64_t, int64_t> sent, received;
  plan.bytes_moved = 0;
  for (const TransferGroup& g : plan.groups) {
    if (!IsNetworkTransfer(g.kind)) continue;
    const int64_t bytes = g.box.NumElements() * DTypeSize(dtype);
    plan.bytes_moved += bytes * g.size();
    sent[g.src_worker] += bytes * g.size();
    for (int64_t i = g.dst_begin; i < g.dst_end; ++i) {
      received[plan.dst_workers[plan.group_dst_devices[i]]] += bytes;
    }
  }
  plan.max_worker_bytes = 0;
  for (const auto& [w, b] : sent) plan.max_worker_bytes = std::max(plan.max_worker_bytes, b);
  for (const auto& [w, b] : received) {
    plan.max_worker_bytes = std::max(plan.max_worker_bytes, b);
  }
  plan.num_rounds = plan.bytes_moved > 0 ? rounds : 0;
}

}  // namespace

absl::StatusOr<ReshardPlan> ComputeReshardPlan(absl::Span<const int64_t> shape,
                                               DType dtype,
                                               const ReshardEndpoint& src,
                                               const ReshardEndpoint& dst,
                                               const ReshardOptions& options) {
  using namespace reshard_internal;  // NOLINT: the strategies of this dispatcher
  MS_ASSIGN_OR_RETURN(ReshardProblem problem,
                      MakeReshardProblem(shape, dtype, src, dst));
  if (std::optional<ReshardPlan> plan = PlanNoOp(problem)) return *std::move(plan);
  if (std::optional<ReshardPlan> plan = PlanSliceLocal(problem)) {
    return *std::move(plan);
  }
  ReshardPlan plan = PlanByBoxIntersection(problem);
  plan.pattern = ClassifyPattern(problem, plan);
  FillTraffic(plan, dtype, 1);
  if (plan.pattern == "all-reduce" && options.all_reduce != AllReduceForm::kDirect) {
    if (std::optional<ReshardPlan> two = PlanTwoPhaseAllReduce(problem)) {
      FillTraffic(*two, dtype, 2);
      if (options.all_reduce == AllReduceForm::kTwoPhase ||
          options.cost.Seconds(two->max_worker_bytes, two->num_rounds) <
              options.cost.Seconds(plan.max_worker_bytes, plan.num_rounds)) {
        return *std::move(two);
      }
    }
  }
  return plan;
}

}  // namespace meshserve
