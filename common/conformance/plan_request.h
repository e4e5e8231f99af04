// JSON form of a reshard-plan request and of its plan (`meshserve plan`).
//
// Request:
//   {"shape": [8, 4], "dtype": "float32",
//    "src": {"mesh": {"x": 2, "y": 2}, "spec": ["x", null],
//            "unreduced": ["y"],          (optional)
//            "devices": [0, 0, 1, 1]},    (optional: worker id per mesh device,
//                                          default 0..n-1)
//    "dst": {same fields}}
// "mesh" keeps its key order (axis order). "spec" takes the one PartitionSpec
// grammar of common/json/sharding_json.h: a list whose entries are null, an
// axis name or a list of names, a string in JAX syntax ("P('x', None)"), or
// {"spec": ..., "unreduced": [...]}. Each side (ReshardEndpointFromJson) is
// validated like a JAX array type (MakeArrayType: known axes, no axis twice,
// spec not longer than the rank, every dim divisible by its shard count).
//
// Plan:
//   {"transfers": [{"src": 0, "dst": 1, "box": [[0, 4], [0, 2]],
//                   "kind": "copy", "src_device": 0, "dst_device": 3,
//                   "bytes": 32, "src_addends": [..] (only when non-empty)}],
//    "local_transfers": N, "bytes_moved": N, "lower_bound_bytes": N,
//    "pattern": "all-gather", "strategy": "PlanByBoxIntersection"}
// "transfers" lists the network transfers only, in execution order; local
// copies and forwards are counted in "local_transfers".
//
// Thread-safety: pure functions over plain values.
#ifndef MESHSERVE_COMMON_CONFORMANCE_PLAN_REQUEST_H_
#define MESHSERVE_COMMON_CONFORMANCE_PLAN_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/reshard_plan.h"
#include "nlohmann/json.hpp"

namespace meshserve {

struct PlanRequest {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  ReshardEndpoint src;
  ReshardEndpoint dst;

  // The validated array types of both sides (for printing).
  ArrayType SrcType() const { return ArrayType{dtype, shape, src.sharding, {}}; }
  ArrayType DstType() const { return ArrayType{dtype, shape, dst.sharding, {}}; }
};

// \error kInvalidArgument naming the offending value: broken JSON, a missing
//   or mistyped field, a malformed spec entry, an unknown axis, a dim not
//   divisible by its shard count, a spec longer than the shape's rank, a
//   "devices" list of the wrong length.
absl::StatusOr<PlanRequest> ParsePlanRequest(absl::string_view json_text);
absl::StatusOr<PlanRequest> PlanRequestFromJson(const nlohmann::ordered_json& json);

// Plans the request (ComputeReshardPlan).
absl::StatusOr<ReshardPlan> PlanForRequest(const PlanRequest& request);

nlohmann::ordered_json PlanToJson(const ReshardPlan& plan, DType dtype);

// The plan as a table, one network transfer per row (src worker -> dst worker,
// kind, box, bytes), at most `max_rows` rows (then "... N more"), followed by
// the local transfer count, the totals and the pattern.
std::string PlanToTable(const ReshardPlan& plan, DType dtype, int max_rows = 64);

// `meshserve plan --human`: both type strings, their visualisations when the
// rank is 1 or 2, the worker maps and PlanToTable.
std::string DescribePlanRequest(const PlanRequest& request, const ReshardPlan& plan);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_CONFORMANCE_PLAN_REQUEST_H_
