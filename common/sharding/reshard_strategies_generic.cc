// PlanByBoxIntersection: the generic strategy (see reshard_plan.h).
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/numeric/bits.h"
#include "common/base/logging.h"
#include "common/sharding/reshard_strategies.h"

namespace meshserve {
namespace reshard_internal {
namespace {

// The source devices of one worker that hold one source shard tuple.
struct SrcHolder {
  int worker = 0;      // dense worker index
  uint64_t mask = 0;   // partial indices held
  // (partial index, one device holding it), ascending by partial index.
  std::vector<std::pair<int64_t, int64_t>> partial_device;

  int64_t DeviceFor(int64_t g) const {
    for (const auto& [pg, device] : partial_device) {
      if (pg == g) return device;
    }
    return -1;  // unreachable: callers ask only for bits of mask
  }
};

// The destination devices of one worker that need one (shard tuple, class).
struct DstGroup {
  int worker = 0;  // dense worker index
  int64_t klass = 0;
  std::vector<int64_t> devices;  // ascending
};

class GenericPlanner {
 public:
  explicit GenericPlanner(const ReshardProblem& p) : p_(p) {}

  ReshardPlan Run();

 private:
  int WorkerIndex(int64_t worker_id);
  void IndexSources();
  void IndexDestinations();
  // Plans one box for one destination group.
  void PlanUnit(const Box& box, int64_t num_elements,
                const std::vector<SrcHolder>& holders, const DstGroup& group);
  // The holders (indices into `holders`) that send `missing`, least-loaded
  // first among minimum covers.
  std::vector<int> ChooseSenders(uint64_t missing, int self,
                                 const std::vector<SrcHolder>& holders);
  void Emit(TransferKind kind, const SrcHolder& from, uint64_t bits,
            int64_t dst_device, const Box& box);

  const ReshardProblem& p_;
  int64_t dtype_size_ = 0;
  absl::flat_hash_map<int64_t, int> worker_index_;
  std::vector<int64_t> worker_ids_;
  std::vector<int64_t> sent_bytes_;  // per dense worker
  std::vector<std::vector<SrcHolder>> src_holders_;  // by source shard tuple
  std::vector<std::vector<DstGroup>> dst_groups_;    // by destination shard tuple
  ReshardPlan plan_;
};

int GenericPlanner::WorkerIndex(int64_t worker_id) {
  auto [it, inserted] =
      worker_index_.try_emplace(worker_id, static_cast<int>(worker_ids_.size()));
  if (inserted) worker_ids_.push_back(worker_id);
  return it->second;
}

void GenericPlanner::IndexSources() {
  src_holders_.assign(p_.src_grid.num_shard_tuples(), {});
  const int64_t n = p_.src->sharding.mesh().num_devices();
  for (int64_t d = 0; d < n; ++d) {
    const int w = WorkerIndex(p_.src->device_workers[d]);
    std::vector<SrcHolder>& holders = src_holders_[p_.src_grid.device_shard()[d]];
    auto it = std::find_if(holders.begin(), holders.end(),
                           [w](const SrcHolder& h) { return h.worker == w; });
    if (it == holders.end()) {
      holders.push_back(SrcHolder{w, 0, {}});
      it = holders.end() - 1;
    }
    const int64_t g = p_.src_partial[d];
    if ((it->mask >> g & 1) == 0) {
      it->mask |= uint64_t{1} << g;
      it->partial_device.emplace_back(g, d);
    }
  }
  for (std::vector<SrcHolder>& holders : src_holders_) {
    for (SrcHolder& h : holders) {
      std::sort(h.partial_device.begin(), h.partial_device.end());
    }
    std::sort(holders.begin(), holders.end(),
              [](const SrcHolder& a, const SrcHolder& b) { return a.worker < b.worker; });
  }
}

void GenericPlanner::IndexDestinations() {
  dst_groups_.assign(p_.dst_grid.num_shard_tuples(), {});
  const int64_t n = p_.dst->sharding.mesh().num_devices();
  for (int64_t d = 0; d < n; ++d) {
    const int w = WorkerIndex(p_.dst->device_workers[d]);
    const int64_t klass = p_.dst_class[d];
    std::vector<DstGroup>& groups = dst_groups_[p_.dst_grid.device_shard()[d]];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const DstGroup& g) {
      return g.worker == w && g.klass == klass;
    });
    if (it == groups.end()) {
      groups.push_back(DstGroup{w, klass, {}});
      it = groups.end() - 1;
    }
    it->devices.push_back(d);
  }
}

std::vector<int> GenericPlanner::ChooseSenders(uint64_t missing, int self,
                                               const std::vector<SrcHolder>& holders) {
  // Distinct useful masks; per mask the least-loaded holder offering it.
  std::vector<uint64_t> masks;
  std::vector<int> best_holder;
  for (int i = 0; i < static_cast<int>(holders.size()); ++i) {
    if (holders[i].worker == self) continue;
    const uint64_t m = holders[i].mask & missing;
    if (m == 0) continue;
    auto it = std::find(masks.begin(), masks.end(), m);
    if (it == masks.end()) {
      masks.push_back(m);
      best_holder.push_back(i);
    } else {
      int& best = best_holder[it - masks.begin()];
      if (sent_bytes_[holders[i].worker] < sent_bytes_[holders[best].worker]) best = i;
    }
  }
  // Prefer wide masks, then light senders, so the cover found first is both
  // minimum and balanced.
  std::vector<int> order(masks.size());
  for (int i = 0; i < static_cast<int>(order.size()); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int pa = absl::popcount(masks[a]);
    const int pb = absl::popcount(masks[b]);
    if (pa != pb) return pa > pb;
    return sent_bytes_[holders[best_holder[a]].worker] <
           sent_bytes_[holders[best_holder[b]].worker];
  });
  std::vector<uint64_t> ordered_masks(order.size());
  for (size_t i = 0; i < order.size(); ++i) ordered_masks[i] = masks[order[i]];
  std::vector<int> senders;
  for (int k : MinimumCover(missing, ordered_masks)) {
    senders.push_back(best_holder[order[k]]);
  }
  return senders;
}

void GenericPlanner::Emit(TransferKind kind, const SrcHolder& from, uint64_t bits,
                          int64_t dst_device, const Box& box) {
  if (from.partial_device.size() == 1) {  // a reduced source: no addends
    plan_.AddTransfer(kind, from.partial_device[0].second, worker_ids_[from.worker],
                      dst_device, box);
    return;
  }
  int64_t src_device = -1;
  absl::InlinedVector<int64_t, 4> addends;
  for (const auto& [g, device] : from.partial_device) {
    if ((bits >> g & 1) == 0) continue;
    if (src_device < 0) {
      src_device = device;
    } else {
      addends.push_back(device);
    }
  }
  plan_.AddTransfer(kind, src_device, worker_ids_[from.worker], dst_device, box,
                    addends);
}

void GenericPlanner::PlanUnit(const Box& box, int64_t num_elements,
                              const std::vector<SrcHolder>& holders,
                              const DstGroup& group) {
  const uint64_t need = p_.need_mask[group.klass];
  const int self = group.worker;
  auto local = std::lower_bound(
      holders.begin(), holders.end(), self,
      [](const SrcHolder& h, int w) { return h.worker < w; });
  const SrcHolder* mine =
      (local != holders.end() && local->worker == self) ? &*local : nullptr;
  const uint64_t held = mine != nullptr ? (mine->mask & need) : 0;
  const uint64_t missing = need & ~held;
  if (missing == 0) {
    // Everything is local: each device slices (and pre-adds) on its own.
    for (int64_t d : group.devices) {
      Emit(TransferKind::kLocalCopy, *mine, held, d, box);
    }
    return;
  }
  const int64_t d0 = group.devices[0];
  bool written = false;
  if (held != 0) {
    Emit(TransferKind::kLocalCopy, *mine, held, d0, box);
    written = true;
  }
  uint64_t remaining = missing;
  const int64_t unit_bytes = num_elements * dtype_size_;
  absl::InlinedVector<int, 4> senders;
  if (p_.num_partials == 1) {
    // Reduced source: one sender, the least-loaded holder (self holds nothing).
    int best = 0;
    for (int i = 1; i < static_cast<int>(holders.size()); ++i) {
      if (sent_bytes_[holders[i].worker] < sent_bytes_[holders[best].worker]) best = i;
    }
    senders.push_back(best);
  } else {
    for (int h : ChooseSenders(missing, self, holders)) senders.push_back(h);
  }
  for (int h : senders) {
    const uint64_t bits = holders[h].mask & remaining;
    remaining &= ~bits;
    Emit(written ? TransferKind::kReduce : TransferKind::kCopy, holders[h], bits, d0,
         box);
    written = true;
    sent_bytes_[holders[h].worker] += unit_bytes;
    plan_.bytes_moved += unit_bytes;
    plan_.lower_bound_bytes += unit_bytes;
  }
  MS_DCHECK(remaining == 0);  // the cover covers
  for (size_t k = 1; k < group.devices.size(); ++k) {
    plan_.AddTransfer(TransferKind::kLocalForward, d0, worker_ids_[self],
                      group.devices[k], box);
  }
}

ReshardPlan GenericPlanner::Run() {
  dtype_size_ = DTypeSize(p_.dtype);
  plan_.dst_workers = p_.dst->device_workers;
  IndexSources();
  IndexDestinations();
  sent_bytes_.assign(worker_ids_.size(), 0);
  const int rank = p_.src_grid.rank();
  std::vector<std::vector<DimOverlap>> overlaps(rank);
  for (int i = 0; i < rank; ++i) {
    overlaps[i] = OverlapsAlongDim(p_.src_grid, p_.dst_grid, i);
    if (overlaps[i].empty()) return std::move(plan_);  // a zero-size dim
  }
  // Two passes of an odometer over the product of the per-dim overlap lists:
  // the first bounds the number of transfers (so the destination list is
  // allocated once), the second plans.
  for (int pass = 0; pass < 2; ++pass) {
    int64_t bound = 0;
    std::vector<size_t> pos(rank, 0);
    Box box{std::vector<Interval>(rank)};
    while (true) {
      int64_t js = 0;
      int64_t jd = 0;
      int64_t num_elements = 1;
      for (int i = 0; i < rank; ++i) {
        const DimOverlap& o = overlaps[i][pos[i]];
        js += o.src_shard * p_.src_grid.tuple_stride(i);
        jd += o.dst_shard * p_.dst_grid.tuple_stride(i);
        box[i] = o.interval;
        num_elements *= o.interval.size();
      }
      const std::vector<SrcHolder>& holders = src_holders_[js];
      for (const DstGroup& group : dst_groups_[jd]) {
        if (pass == 0) {
          // Reduced sources: exactly one transfer per destination device
          // (local copy, receive, or forward); partial sums add the senders.
          bound += static_cast<int64_t>(group.devices.size()) +
                   (p_.num_partials == 1
                        ? 0
                        : std::min<int64_t>(p_.num_partials, holders.size()));
        } else {
          PlanUnit(box, num_elements, holders, group);
        }
      }
      int i = rank - 1;
      while (i >= 0 && ++pos[i] == overlaps[i].size()) pos[i--] = 0;
      if (i < 0) break;
    }
    if (pass == 0) plan_.group_dst_devices.reserve(bound);
  }
  return std::move(plan_);
}

}  // namespace

ReshardPlan PlanByBoxIntersection(const ReshardProblem& problem) {
  ReshardPlan plan = GenericPlanner(problem).Run();
  plan.strategy = "PlanByBoxIntersection";
  return plan;
}

}  // namespace reshard_internal
}  // namespace meshserve
