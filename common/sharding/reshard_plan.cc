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
