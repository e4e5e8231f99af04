#include "common/sharding/reshard_plan.h"

#include <optional>
#include <utility>

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
  }
  return "?";
}

bool IsNetworkTransfer(TransferKind kind) {
  return kind == TransferKind::kCopy || kind == TransferKind::kReduce;
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

int64_t ReshardPlan::NumNetworkTransfers() const {
  int64_t n = 0;
  for (const Transfer& t : transfers) n += IsNetworkTransfer(t.kind) ? 1 : 0;
  return n;
}

absl::StatusOr<ReshardPlan> ComputeReshardPlan(absl::Span<const int64_t> shape,
                                               DType dtype,
                                               const ReshardEndpoint& src,
                                               const ReshardEndpoint& dst) {
  using namespace reshard_internal;  // NOLINT: the strategies of this dispatcher
  MS_ASSIGN_OR_RETURN(ReshardProblem problem,
                      MakeReshardProblem(shape, dtype, src, dst));
  if (std::optional<ReshardPlan> plan = PlanNoOp(problem)) return *std::move(plan);
  if (std::optional<ReshardPlan> plan = PlanSliceLocal(problem)) {
    return *std::move(plan);
  }
  ReshardPlan plan = PlanByBoxIntersection(problem);
  plan.pattern = ClassifyPattern(problem, plan);
  return plan;
}

}  // namespace meshserve
