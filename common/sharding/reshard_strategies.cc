#include "common/sharding/reshard_strategies.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/numeric/bits.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace reshard_internal {
namespace {

std::string WorkersToString(absl::Span<const int64_t> workers) {
  if (workers.size() > 16) {
    return absl::StrCat("[", absl::StrJoin(workers.subspan(0, 16), ", "), ", ...]");
  }
  return absl::StrCat("[", absl::StrJoin(workers, ", "), "]");
}

absl::Status CheckWorkers(absl::string_view side, const ReshardEndpoint& ep) {
  const int64_t n = ep.sharding.mesh().num_devices();
  if (static_cast<int64_t>(ep.device_workers.size()) != n) {
    return InvalidArgument(side, " device_workers ",
                           WorkersToString(ep.device_workers), " has ",
                           ep.device_workers.size(), " entries but ",
                           ep.sharding.mesh().ToString(), " has ", n, " devices");
  }
  if (n > std::numeric_limits<int32_t>::max()) {  // plans store device ids as int32
    return InvalidArgument(side, " ", ep.sharding.mesh().ToString(), " has ", n,
                           " devices; plans support at most 2^31 - 1");
  }
  return absl::OkStatus();
}

// Unreduced axes of `sharding` as mesh axis indices, in mesh order.
absl::StatusOr<std::vector<int>> UnreducedAxes(absl::string_view side,
                                               const NamedSharding& sharding) {
  std::vector<int> axes;
  for (const std::string& name : sharding.spec().unreduced()) {
    std::optional<int> axis = sharding.mesh().AxisIndex(name);
    if (!axis.has_value()) {
      return InvalidArgument(side, " unreduced axis '", name, "' of ",
                             sharding.spec().ToString(), " is not in ",
                             sharding.mesh().ToString());
    }
    if (std::find(axes.begin(), axes.end(), *axis) == axes.end()) {
      axes.push_back(*axis);
    }
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

// Fills num_partials, src_partial, dst_class, need_mask, reduced_axes.
absl::Status IndexPartialSums(ReshardProblem& p) {
  const Mesh& src_mesh = p.src->sharding.mesh();
  const Mesh& dst_mesh = p.dst->sharding.mesh();
  MS_ASSIGN_OR_RETURN(std::vector<int> src_u, UnreducedAxes("source", p.src->sharding));
  MS_ASSIGN_OR_RETURN(std::vector<int> dst_u,
                      UnreducedAxes("destination", p.dst->sharding));
  int64_t num_partials = 1;
  for (int a : src_u) {
    num_partials *= src_mesh.axis(a).size;
    if (num_partials > 64) {
      return absl::UnimplementedError(absl::StrCat(
          "the source ", p.src->sharding.spec().ToString(), " on ",
          src_mesh.ToString(), " has more than 64 partial sums"));
    }
  }
  // Position in src_u of every destination unreduced axis.
  std::vector<int> dst_u_in_src;
  for (int a : dst_u) {
    const MeshAxis& axis = dst_mesh.axis(a);
    int pos = -1;
    for (int k = 0; k < static_cast<int>(src_u.size()); ++k) {
      if (src_mesh.axis(src_u[k]).name == axis.name) pos = k;
    }
    if (pos < 0 || src_mesh.axis(src_u[pos]).size != axis.size) {
      return InvalidArgument(
          "destination unreduced axis '", axis.name, "' (size ", axis.size,
          ") of ", p.dst->sharding.spec().ToString(),
          " is not an unreduced axis of the same size in the source ",
          p.src->sharding.spec().ToString(), " on ", src_mesh.ToString());
    }
    dst_u_in_src.push_back(pos);
  }
  for (int a : src_u) {
    const std::string& name = src_mesh.axis(a).name;
    bool kept = false;
    for (int b : dst_u) kept |= dst_mesh.axis(b).name == name;
    if (!kept) p.reduced_axes.push_back(name);
  }
  p.num_partials = num_partials;
  p.src_partial = PartialIndexByDevice(src_mesh, src_u);
  p.dst_class = PartialIndexByDevice(dst_mesh, dst_u);
  int64_t num_classes = 1;
  for (int a : dst_u) num_classes *= dst_mesh.axis(a).size;
  p.need_mask.assign(num_classes, 0);
  for (int64_t g = 0; g < num_partials; ++g) {
    // Digits of g over src_u (most significant first).
    std::vector<int64_t> digits(src_u.size());
    int64_t rest = g;
    for (int k = static_cast<int>(src_u.size()) - 1; k >= 0; --k) {
      digits[k] = rest % src_mesh.axis(src_u[k]).size;
      rest /= src_mesh.axis(src_u[k]).size;
    }
    int64_t h = 0;
    for (size_t k = 0; k < dst_u.size(); ++k) {
      h = h * dst_mesh.axis(dst_u[k]).size + digits[dst_u_in_src[k]];
    }
    p.need_mask[h] |= uint64_t{1} << g;
  }
  return absl::OkStatus();
}

ReshardPlan LocalPlan(const ReshardProblem& p, absl::string_view strategy,
                      absl::string_view pattern) {
  ReshardPlan plan;
  plan.strategy = std::string(strategy);
  plan.pattern = std::string(pattern);
  plan.dst_workers = p.dst->device_workers;
  const int64_t n = p.dst->sharding.mesh().num_devices();
  plan.group_dst_devices.reserve(n);
  for (int64_t d = 0; d < n; ++d) {
    const Box box = p.dst_grid.ShardBox(p.dst_grid.device_shard()[d]);
    if (box.IsEmpty()) continue;
    plan.AddTransfer(TransferKind::kLocalCopy, d, p.dst->device_workers[d], d, box);
  }
  return plan;
}

bool SameUnreducedSet(const PartitionSpec& a, const PartitionSpec& b) {
  absl::flat_hash_set<std::string> sa(a.unreduced().begin(), a.unreduced().end());
  absl::flat_hash_set<std::string> sb(b.unreduced().begin(), b.unreduced().end());
  return sa == sb;
}

bool DimContains(const Interval& outer, const Interval& inner) {
  return inner.empty() || (outer.begin <= inner.begin && inner.end <= outer.end);
}

// Searches covers of exactly `limit` masks; appends to `chosen`.
bool SearchCover(uint64_t uncovered, absl::Span<const uint64_t> masks, int limit,
                 std::vector<int>& chosen) {
  if (uncovered == 0) return true;
  if (static_cast<int>(chosen.size()) == limit) return false;
  const uint64_t lowest = uncovered & (~uncovered + 1);
  for (int i = 0; i < static_cast<int>(masks.size()); ++i) {
    if ((masks[i] & lowest) == 0) continue;
    chosen.push_back(i);
    if (SearchCover(uncovered & ~masks[i], masks, limit, chosen)) return true;
    chosen.pop_back();
  }
  return false;
}

}  // namespace

std::vector<int> MinimumCover(uint64_t target, absl::Span<const uint64_t> masks) {
  std::vector<int> chosen;
  if (target == 0) return chosen;
  // Fast path: one mask suffices.
  for (int i = 0; i < static_cast<int>(masks.size()); ++i) {
    if ((masks[i] & target) == target) return {i};
  }
  // Fast path: pairwise disjoint masks (every worker holds its own partials,
  // the usual layout) -> every mask touching the target is needed.
  uint64_t seen = 0;
  bool disjoint = true;
  for (uint64_t m : masks) {
    disjoint &= (seen & m & target) == 0;
    seen |= m & target;
  }
  if (disjoint) {
    for (int i = 0; i < static_cast<int>(masks.size()); ++i) {
      if ((masks[i] & target) != 0) chosen.push_back(i);
    }
    return chosen;
  }
  for (int limit = 2; limit <= 64; ++limit) {
    chosen.clear();
    if (SearchCover(target, masks, limit, chosen)) return chosen;
  }
  MS_CHECK(false);  // Precondition: the masks cover the target.
  return chosen;
}

absl::StatusOr<ReshardProblem> MakeReshardProblem(absl::Span<const int64_t> shape,
                                                  DType dtype,
                                                  const ReshardEndpoint& src,
                                                  const ReshardEndpoint& dst) {
  ReshardProblem p;
  p.shape.assign(shape.begin(), shape.end());
  p.dtype = dtype;
  p.src = &src;
  p.dst = &dst;
  MS_RETURN_IF_ERROR(CheckWorkers("source", src));
  MS_RETURN_IF_ERROR(CheckWorkers("destination", dst));
  MS_ASSIGN_OR_RETURN(p.src_grid, ShardGrid::Create(shape, src.sharding), "source");
  MS_ASSIGN_OR_RETURN(p.dst_grid, ShardGrid::Create(shape, dst.sharding),
                      "destination");
  MS_RETURN_IF_ERROR(IndexPartialSums(p));
  p.same_mesh_and_workers = src.sharding.mesh() == dst.sharding.mesh() &&
                            src.device_workers == dst.device_workers;
  return p;
}

std::optional<ReshardPlan> PlanNoOp(const ReshardProblem& p) {
  if (!p.same_mesh_and_workers) return std::nullopt;
  if (p.src->sharding.spec().entries() != p.dst->sharding.spec().entries() ||
      !SameUnreducedSet(p.src->sharding.spec(), p.dst->sharding.spec())) {
    return std::nullopt;
  }
  return LocalPlan(p, "PlanNoOp", "no-op");
}

std::optional<ReshardPlan> PlanSliceLocal(const ReshardProblem& p) {
  if (!p.same_mesh_and_workers ||
      !SameUnreducedSet(p.src->sharding.spec(), p.dst->sharding.spec())) {
    return std::nullopt;
  }
  const int64_t n = p.dst->sharding.mesh().num_devices();
  for (int64_t d = 0; d < n; ++d) {
    const int64_t s = p.src_grid.device_shard()[d];
    const int64_t t = p.dst_grid.device_shard()[d];
    for (int i = 0; i < p.src_grid.rank(); ++i) {
      const int64_t js = (s / p.src_grid.tuple_stride(i)) % p.src_grid.num_shards(i);
      const int64_t jd = (t / p.dst_grid.tuple_stride(i)) % p.dst_grid.num_shards(i);
      if (!DimContains(p.src_grid.ShardInterval(i, js),
                       p.dst_grid.ShardInterval(i, jd))) {
        return std::nullopt;
      }
    }
  }
  return LocalPlan(p, "PlanSliceLocal", "local slice");
}

std::string ClassifyPattern(const ReshardProblem& p, const ReshardPlan& plan) {
  if (!p.same_mesh_and_workers) return "general point-to-point";
  if (plan.NumNetworkTransfers() == 0) return "local slice";
  if (!p.reduced_axes.empty()) {
    for (const std::string& axis : p.dst->sharding.spec().AxesUsed()) {
      if (std::find(p.reduced_axes.begin(), p.reduced_axes.end(), axis) !=
          p.reduced_axes.end()) {
        return "reduce-scatter";
      }
    }
    return "all-reduce";
  }
  bool gathers = true;
  bool same_size = true;
  const int64_t n = p.dst->sharding.mesh().num_devices();
  for (int64_t d = 0; d < n; ++d) {
    const Box s = p.src_grid.ShardBox(p.src_grid.device_shard()[d]);
    const Box t = p.dst_grid.ShardBox(p.dst_grid.device_shard()[d]);
    gathers &= t.Contains(s);
    same_size &= t.NumElements() == s.NumElements();
  }
  if (gathers) return "all-gather";
  if (same_size) return "all-to-all";
  return "general point-to-point";
}

}  // namespace reshard_internal
}  // namespace meshserve
