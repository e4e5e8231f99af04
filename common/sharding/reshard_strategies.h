// Strategies of the reshard planner (see reshard_plan.h for the mathematics and
// the guarantees). Internal to ComputeReshardPlan; exposed for tests and the
// benchmark.
//
//   ReshardProblem          the validated request plus its shard grids and
//                           partial-sum indexing, built once.
//   PlanNoOp                identical layouts: identity local copies.
//   PlanSliceLocal          every device's new box lies in its old box.
//   PlanByBoxIntersection   the generic fallback (any two layouts, any meshes).
//   ClassifyPattern         names the collective a plan implements.
//   MinimumCover            exact minimum set cover over <= 64 partial sums.
#ifndef MESHSERVE_COMMON_SHARDING_RESHARD_STRATEGIES_H_
#define MESHSERVE_COMMON_SHARDING_RESHARD_STRATEGIES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/sharding/reshard_plan.h"
#include "common/sharding/reshard_plan_geometry.h"

namespace meshserve {
namespace reshard_internal {

struct ReshardProblem {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  const ReshardEndpoint* src = nullptr;  // not owned; outlives the problem
  const ReshardEndpoint* dst = nullptr;
  ShardGrid src_grid;
  ShardGrid dst_grid;
  // G: number of distinct partial sums of the source (1 when reduced).
  int64_t num_partials = 1;
  // Partial index g of every source device.
  std::vector<int64_t> src_partial;
  // Partial class h of every destination device (its coordinates over the
  // destination's unreduced axes).
  std::vector<int64_t> dst_class;
  // need_mask[h]: bit g set when a device of class h needs partial g.
  std::vector<uint64_t> need_mask;
  // Same mesh, same worker of every device.
  bool same_mesh_and_workers = false;
  // Source unreduced axes that the destination no longer has.
  std::vector<std::string> reduced_axes;
};

// Validates and indexes (errors as ComputeReshardPlan documents).
absl::StatusOr<ReshardProblem> MakeReshardProblem(absl::Span<const int64_t> shape,
                                                  DType dtype,
                                                  const ReshardEndpoint& src,
                                                  const ReshardEndpoint& dst);

// nullopt when the strategy does not apply.
std::optional<ReshardPlan> PlanNoOp(const ReshardProblem& problem);
std::optional<ReshardPlan> PlanSliceLocal(const ReshardProblem& problem);
// Always applies.
ReshardPlan PlanByBoxIntersection(const ReshardProblem& problem);

std::string ClassifyPattern(const ReshardProblem& problem, const ReshardPlan& plan);

// Indices into `masks` of a smallest family whose union contains `target`,
// preferring earlier masks among equally small families (callers order masks
// by preference). Empty when target == 0. Precondition: the union of all
// masks contains target. Exact (iterative deepening, branching on the lowest
// uncovered bit), so exponential only in the cover size.
std::vector<int> MinimumCover(uint64_t target, absl::Span<const uint64_t> masks);

}  // namespace reshard_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RESHARD_STRATEGIES_H_
