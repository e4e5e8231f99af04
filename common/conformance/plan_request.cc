#include "common/conformance/plan_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/visualize.h"

namespace meshserve {
namespace {

using Json = nlohmann::ordered_json;

std::string Show(const Json& j) {
  std::string text = j.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

absl::StatusOr<const Json*> Field(const Json& obj, const char* key,
                                  absl::string_view where) {
  if (!obj.is_object()) {
    return InvalidArgument(where, " must be an object, got ", Show(obj));
  }
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    return InvalidArgument("missing field '", key, "' in ", where);
  }
  return &*it;
}

absl::StatusOr<std::vector<int64_t>> IntList(const Json& j, absl::string_view where) {
  if (!j.is_array()) {
    return InvalidArgument(where, " must be a list of integers, got ", Show(j));
  }
  std::vector<int64_t> out;
  for (const Json& v : j) {
    if (!v.is_number_integer()) {
      return InvalidArgument(where, " must be a list of integers, got ", Show(v),
                             " in ", Show(j));
    }
    out.push_back(v.get<int64_t>());
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> NameList(const Json& j,
                                                  absl::string_view where) {
  if (!j.is_array()) {
    return InvalidArgument(where, " must be a list of axis names, got ", Show(j));
  }
  std::vector<std::string> out;
  for (const Json& v : j) {
    if (!v.is_string()) {
      return InvalidArgument(where, " must be a list of axis names, got ", Show(v),
                             " in ", Show(j));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

absl::StatusOr<Mesh> MeshFromJson(const Json& j, absl::string_view where) {
  if (!j.is_object()) {
    return InvalidArgument(where, " must be an object {\"axis\": size, ...}, got ",
                           Show(j));
  }
  std::vector<MeshAxis> axes;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_number_integer()) {
      return InvalidArgument(where, " axis '", it.key(),
                             "' must have an integer size, got ", Show(*it));
    }
    axes.push_back(MeshAxis{it.key(), it->get<int64_t>(), AxisType::kExplicit});
  }
  MS_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create(std::move(axes)), where);
  return mesh;
}

absl::StatusOr<PartitionSpec> SpecFromJson(const Json& j, absl::string_view where) {
  if (j.is_string()) {
    MS_ASSIGN_OR_RETURN(PartitionSpec spec, ParsePartitionSpec(j.get<std::string>()),
                        where);
    return spec;
  }
  if (!j.is_array()) {
    return InvalidArgument(where, " must be a list or a P(...) string, got ", Show(j));
  }
  std::vector<PartitionSpec::Entry> entries;
  for (const Json& e : j) {
    if (e.is_null()) {
      entries.emplace_back();
    } else if (e.is_string()) {
      entries.push_back({e.get<std::string>()});
    } else if (e.is_array()) {
      MS_ASSIGN_OR_RETURN(std::vector<std::string> names, NameList(e, where));
      entries.push_back(std::move(names));
    } else {
      return InvalidArgument(where, " entry ", Show(e),
                             " must be null, an axis name or a list of names (in ",
                             Show(j), ")");
    }
  }
  return PartitionSpec(std::move(entries));
}

absl::StatusOr<ReshardEndpoint> EndpointFromJson(const Json& request, const char* key,
                                                 absl::Span<const int64_t> shape,
                                                 DType dtype) {
  MS_ASSIGN_OR_RETURN(const Json* side, Field(request, key, "the request"));
  const std::string where(key);
  MS_ASSIGN_OR_RETURN(const Json* mesh_json, Field(*side, "mesh", where));
  MS_ASSIGN_OR_RETURN(Mesh mesh, MeshFromJson(*mesh_json, where + ".mesh"));
  MS_ASSIGN_OR_RETURN(const Json* spec_json, Field(*side, "spec", where));
  MS_ASSIGN_OR_RETURN(PartitionSpec spec, SpecFromJson(*spec_json, where + ".spec"));
  auto unreduced = side->find("unreduced");
  if (unreduced != side->end() && !unreduced->is_null()) {
    MS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        NameList(*unreduced, where + ".unreduced"));
    std::vector<std::string> all = spec.unreduced();
    all.insert(all.end(), names.begin(), names.end());
    spec = spec.WithUnreduced(std::move(all));
  }
  MS_ASSIGN_OR_RETURN(
      ArrayType type,
      MakeArrayType(dtype, std::vector<int64_t>(shape.begin(), shape.end()), mesh, spec),
      where);
  ReshardEndpoint ep;
  ep.sharding = type.sharding;
  auto devices = side->find("devices");
  if (devices == side->end() || devices->is_null()) {
    ep.device_workers = OneWorkerPerDevice(mesh);
  } else {
    MS_ASSIGN_OR_RETURN(ep.device_workers, IntList(*devices, where + ".devices"));
    if (static_cast<int64_t>(ep.device_workers.size()) != mesh.num_devices()) {
      return InvalidArgument(where, ".devices ", Show(*devices), " has ",
                             ep.device_workers.size(), " entries but ",
                             mesh.ToString(), " has ", mesh.num_devices(),
                             " devices");
    }
  }
  return ep;
}

}  // namespace

absl::StatusOr<PlanRequest> PlanRequestFromJson(const Json& json) {
  PlanRequest r;
  MS_ASSIGN_OR_RETURN(const Json* shape, Field(json, "shape", "the request"));
  MS_ASSIGN_OR_RETURN(r.shape, IntList(*shape, "shape"));
  for (int64_t d : r.shape) {
    if (d < 0) return InvalidArgument("shape ", Show(*shape), " has a negative dim");
  }
  auto dtype = json.find("dtype");
  if (dtype != json.end() && !dtype->is_null()) {
    if (!dtype->is_string()) {
      return InvalidArgument("dtype must be a string, got ", Show(*dtype));
    }
    MS_ASSIGN_OR_RETURN(r.dtype, ParseDType(dtype->get<std::string>()), "dtype");
  }
  MS_ASSIGN_OR_RETURN(r.src, EndpointFromJson(json, "src", r.shape, r.dtype));
  MS_ASSIGN_OR_RETURN(r.dst, EndpointFromJson(json, "dst", r.shape, r.dtype));
  return r;
}

absl::StatusOr<PlanRequest> ParsePlanRequest(absl::string_view json_text) {
  Json json = Json::parse(json_text.begin(), json_text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Parse again with exceptions only to get the position of the error.
    try {
      (void)Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::parse_error& e) {
      return InvalidArgument("broken JSON: ", e.what());
    }
    return InvalidArgument("broken JSON");
  }
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
