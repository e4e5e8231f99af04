#include "common/conformance/plan_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/sharding_json.h"
#include "common/sharding/visualize.h"

namespace meshserve {

absl::StatusOr<PlanRequest> PlanRequestFromJson(const Json& json) {
  PlanRequest r;
  MS_ASSIGN_OR_RETURN(const Json* shape, RequiredJsonField(json, "shape", "the request"));
  MS_ASSIGN_OR_RETURN(r.shape, JsonIntList(*shape, "shape"));
  for (int64_t d : r.shape) {
    if (d < 0) return InvalidArgument("shape ", ShowJson(*shape), " has a negative dim");
  }
  if (const Json* dtype = FindJsonField(json, "dtype")) {
    MS_ASSIGN_OR_RETURN(std::string name, JsonString(*dtype, "dtype"));
    MS_ASSIGN_OR_RETURN(r.dtype, ParseDType(name), "dtype");
  }
  MS_ASSIGN_OR_RETURN(const Json* src, RequiredJsonField(json, "src", "the request"));
  MS_ASSIGN_OR_RETURN(r.src, ReshardEndpointFromJson(*src, "src", r.shape, r.dtype));
  MS_ASSIGN_OR_RETURN(const Json* dst, RequiredJsonField(json, "dst", "the request"));
  MS_ASSIGN_OR_RETURN(r.dst, ReshardEndpointFromJson(*dst, "dst", r.shape, r.dtype));
  return r;
}

absl::StatusOr<PlanRequest> ParsePlanRequest(absl::string_view json_text) {
  MS_ASSIGN_OR_RETURN(Json json, ParseJsonText(json_text), "broken JSON");
  return PlanRequestFromJson(json);
}

absl::StatusOr<ReshardPlan> PlanForRequest(const PlanRequest& request) {
  return ComputeReshardPlan(request.shape, request.dtype, request.src, request.dst);
}

Json PlanToJson(const ReshardPlan& plan, DType dtype) {
  Json transfers = Json::array();
  int64_t local = 0;
  for (const Transfer& t : plan.Transfers()) {
    if (!IsNetworkTransfer(t.kind)) {
      ++local;
      continue;
    }
    Json box = Json::array();
    for (const Interval& i : t.box.dims()) box.push_back({i.begin, i.end});
    Json j = {{"src", t.src_worker},         {"dst", t.dst_worker},
              {"box", std::move(box)},       {"kind", std::string(TransferKindName(t.kind))},
              {"src_device", t.src_device},  {"dst_device", t.dst_device},
              {"bytes", t.Bytes(dtype)}};
    if (!t.src_addends.empty()) j["src_addends"] = t.src_addends;
    transfers.push_back(std::move(j));
  }
  Json out;
  out["transfers"] = std::move(transfers);
  out["local_transfers"] = local;
  out["bytes_moved"] = plan.bytes_moved;
  out["lower_bound_bytes"] = plan.lower_bound_bytes;
  out["pattern"] = plan.pattern;
  out["strategy"] = plan.strategy;
  return out;
}

std::string PlanToTable(const ReshardPlan& plan, DType dtype, int max_rows) {
  std::string out = absl::StrFormat("  %-24s %-7s %-28s %12s\n", "src worker -> dst worker",
                                    "kind", "box", "bytes");
  int64_t rows = 0;
  int64_t local = 0;
  for (const Transfer& t : plan.Transfers()) {
    if (!IsNetworkTransfer(t.kind)) {
      ++local;
      continue;
    }
    if (rows++ >= max_rows) continue;
    std::string route = absl::StrCat("w", t.src_worker, " -> w", t.dst_worker);
    std::string box = t.box.ToString();
    if (!t.src_addends.empty()) {
      absl::StrAppend(&box, " (sum of ", 1 + t.src_addends.size(), " partials)");
    }
    absl::StrAppendFormat(&out, "  %-24s %-7s %-28s %12d\n", route,
                          TransferKindName(t.kind), box, t.Bytes(dtype));
  }
  if (rows > max_rows) absl::StrAppend(&out, "  ... ", rows - max_rows, " more\n");
  absl::StrAppend(&out, "  network transfers: ", rows, ", local transfers (0 bytes): ",
                  local, "\n");
  absl::StrAppend(&out, "  bytes moved: ", plan.bytes_moved,
                  "  lower bound: ", plan.lower_bound_bytes, "\n");
  absl::StrAppend(&out, "  pattern: ", plan.pattern, "  (strategy ", plan.strategy,
                  ")\n");
  return out;
}

std::string DescribePlanRequest(const PlanRequest& request, const ReshardPlan& plan) {
  std::string out;
  const struct {
    const char* title;
    ArrayType type;
    const ReshardEndpoint* ep;
  } sides[] = {{"source", request.SrcType(), &request.src},
               {"destination", request.DstType(), &request.dst}};
  for (const auto& side : sides) {
    absl::StrAppend(&out, side.title, ": ", side.type.ToString(), " on ",
                    side.ep->sharding.mesh().ToString(), ", spec ",
                    side.ep->sharding.spec().ToString(), "\n  workers of devices: [",
                    absl::StrJoin(side.ep->device_workers, ", "), "]\n");
    if (side.type.rank() == 1 || side.type.rank() == 2) {
      absl::StatusOr<std::string> picture =
          VisualizeSharding(side.type.shape, side.ep->sharding);
      absl::StrAppend(&out, picture.ok() ? *picture : picture.status().ToString(),
                      "\n");
    }
  }
  absl::StrAppend(&out, "plan:\n", PlanToTable(plan, request.dtype));
  return out;
}

}  // namespace meshserve
