#include "client/cli_format.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/visualize.h"

namespace meshserve {
namespace client {
namespace {

int KindOrder(const std::string& kind) {
  if (kind == "input") return 0;
  if (kind == "param") return 1;
  return 2;  // activation, output
}

// The KV cache section: each cache array with its type and bytes per token per
// worker (the server's "bytes per token: worker W (devices ...): N" lines),
// then those bytes summed over every layer's keys and values.
void AppendKvCache(const DescribeResponse& response, std::string* out) {
  std::vector<const DescribeResponse::Value*> caches;
  for (const auto& value : response.values()) {
    if (value.kind() == "kv_cache") caches.push_back(&value);
  }
  if (caches.empty()) return;
  absl::StrAppend(out, "# kv cache (per attention layer: [tokens, kv_heads, head_dim])\n");
  size_t width = 0;
  for (const auto* c : caches) width = std::max(width, c->name().size());
  std::map<std::string, int64_t> total;  // "worker W (devices ...)" -> bytes per token
  std::vector<std::string> order;
  for (const auto* c : caches) {
    absl::StrAppend(out, absl::StrFormat("%-*s  %s\n", static_cast<int>(width), c->name(),
                                         c->type_str()));
    for (absl::string_view line : absl::StrSplit(c->visualization(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(out, "  ", line, "\n");
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "bytes per token: ")) continue;
      const size_t colon = rest.rfind(": ");
      int64_t bytes = 0;
      if (colon == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(colon + 2), &bytes)) {
        continue;
      }
      const std::string who(rest.substr(0, colon));
      if (total.emplace(who, 0).second) order.push_back(who);
      total[who] += bytes;
    }
  }
  for (const std::string& who : order) {
    absl::StrAppend(out, "total bytes per token (all layers, k and v): ", who, ": ", total[who],
                    "\n");
  }
}

}  // namespace

std::string FormatDescribe(const DescribeResponse& response) {
  std::string out = absl::StrCat("# model ", response.model(), " on ", response.mesh(), "\n");
  // Each name once, inputs then params then layer results (stable order);
  // the KV cache has its own section.
  std::vector<const DescribeResponse::Value*> values;
  std::set<std::string> seen;
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto& value : response.values()) {
      if (value.kind() == "kv_cache") continue;
      if (KindOrder(value.kind()) != pass || !seen.insert(value.name()).second) continue;
      values.push_back(&value);
    }
  }
  size_t width = 0;
  for (const auto* value : values) width = std::max(width, value->name().size());
  for (const auto* value : values) {
    absl::StrAppend(&out, absl::StrFormat("%-*s  %s\n", static_cast<int>(width),
                                          value->name(), value->type_str()));
  }
  absl::StrAppend(&out, "# visualizations\n");
  for (const auto* value : values) {
    if (value->visualization().empty()) continue;
    absl::StrAppend(&out, value->name(), ": ", value->type_str(), "\n",
                    value->visualization());
    if (value->visualization().back() != '\n') absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "# collectives\n");
  if (response.collectives().empty()) absl::StrAppend(&out, "(none: every layer is local)\n");
  int64_t total = 0;
  for (const auto& c : response.collectives()) {
    absl::StrAppend(&out, c.layer(), ": ", c.pattern(), " ", c.value(), "  ", c.bytes(),
                    " bytes\n");
    total += c.bytes();
  }
  if (!response.collectives().empty()) {
    absl::StrAppend(&out, "total: ", total, " bytes per request\n");
  }
  AppendKvCache(response, &out);
  return out;
}

std::string FormatStatus(const ClusterStatusResponse& response) {
  std::string out = absl::StrCat("workers: ", response.workers_size(), "\n");
  for (const auto& w : response.workers()) {
    absl::StrAppend(
        &out, absl::StrFormat("  worker %d  %s  %s  blas=%s threads=%d cores=%d  "
                              "heartbeat %dms ago\n",
                              w.worker_id(), w.address(),
                              w.warming() ? "warming" : (w.healthy() ? "healthy" : "UNHEALTHY"),
                              w.blas_core().empty() ? "?" : w.blas_core(),
                              w.blas_threads(), w.cores(), w.last_heartbeat_ms_ago()));
    if (w.gemm_gflops_large_m() > 0) {  // measured (server/worker/calibration.h)
      absl::StrAppend(&out, absl::StrFormat("    calibration: GEMM %.1f / %.1f / %.1f GFLOP/s "
                                            "(one row / M<=16 / large M), memory %.1f GB/s\n",
                                            w.gemm_gflops_one_row(), w.gemm_gflops_small_m(),
                                            w.gemm_gflops_large_m(),
                                            w.memory_bytes_per_s() / 1e9));
    }
    for (const auto& p : w.placements()) {
      absl::StrAppend(&out, absl::StrFormat("    %s gen %d devices [%s] coords [%s] "
                                            "params %d bytes version %d",
                                            p.model(), p.generation(),
                                            absl::StrJoin(p.devices(), ","),
                                            absl::StrJoin(p.coords(), "; "),
                                            p.param_bytes(), p.version()));
      if (!p.replica_devices().empty()) {
        absl::StrAppend(&out, " replicas [", absl::StrJoin(p.replica_devices(), ","), "]");
      }
      absl::StrAppend(&out, "\n");
    }
  }
  absl::StrAppend(&out, "models: ", response.models_size(), "\n");
  for (const auto& m : response.models()) {
    absl::StrAppend(&out, absl::StrFormat("  %s  %s  %s  generation %d  version %d  "
                                          "replicas %d\n",
                                          m.name(), m.state(), m.mesh(), m.generation(),
                                          m.version(), m.replicas()));
    if (m.scale_steps().empty()) continue;
    const auto& s = m.scale_steps(m.scale_steps_size() - 1);
    absl::StrAppend(&out, absl::StrFormat("    last scale step: generation %d, %d workers, "
                                          "%.3f s, bytes moved %d (lower bound %d), "
                                          "local %d, initialized %d\n",
                                          s.generation(), s.workers(), s.seconds(),
                                          s.bytes_moved(), s.lower_bound_bytes(),
                                          s.bytes_local(), s.bytes_initialized()));
  }
  return out;
}

absl::StatusOr<OutputType> TypeFromSpec(DType dtype, const std::vector<int64_t>& shape,
                                        absl::string_view mesh_text,
                                        absl::string_view spec_text) {
  MS_ASSIGN_OR_RETURN(Mesh mesh, ParseMesh(mesh_text), "mesh '", mesh_text, "'");
  MS_ASSIGN_OR_RETURN(PartitionSpec spec, ParsePartitionSpec(spec_text),
                      "out_sharding '", spec_text, "'");
  MS_ASSIGN_OR_RETURN(ArrayType type, MakeArrayType(dtype, shape, mesh, spec));
  OutputType out;
  out.type_str = type.ToString();
  if (type.rank() >= 1 && type.rank() <= 2) {
    auto vis = VisualizeSharding(type.shape, type.sharding);
    if (vis.ok()) out.visualization = *vis;
  }
  return out;
}

const absl::StatusOr<DescribeResponse>& OutputTypeResolver::Described() {
  if (!described_.has_value()) {
    described_ = client_.Describe(model_, input_shapes_, deadline_);
  }
  return *described_;
}

OutputType OutputTypeResolver::Resolve(const InferOutput& output) {
  OutputType derived = Derive(output.tensor);
  // The server's own type (output parameter "type") wins; the derived grid
  // is kept only when it draws that same type.
  auto it = output.parameters.find("type");
  if (it == output.parameters.end() || it->second.empty()) return derived;
  OutputType out{it->second, ""};
  auto vis = output.parameters.find("visualization");
  if (vis != output.parameters.end()) {
    out.visualization = vis->second;
  } else if (derived.type_str == it->second) {
    out.visualization = derived.visualization;
  }
  return out;
}

OutputType OutputTypeResolver::Derive(const NamedTensor& tensor) {
  const absl::StatusOr<DescribeResponse>& described = Described();
  if (!described.ok()) {
    return {absl::StrCat(DTypeName(tensor.dtype), ShapeToCompactString(tensor.shape), " (sharding unknown: ",
                         described.status().ToString(), ")"),
            ""};
  }
  auto spec = out_shardings_.find(tensor.name);
  if (spec != out_shardings_.end()) {
    auto type = TypeFromSpec(tensor.dtype, tensor.shape, described->mesh(), spec->second);
    if (type.ok()) return *type;
    return {absl::StrCat(DTypeName(tensor.dtype), ShapeToCompactString(tensor.shape), " (sharding unknown: ",
                         type.status().message(), ")"),
            ""};
  }
  const DescribeResponse::Value* found = nullptr;
  for (const auto& value : described->values()) {
    if (value.name() != tensor.name) continue;
    if (found == nullptr || value.kind() == "output") found = &value;
  }
  if (found == nullptr) {
    return {absl::StrCat(DTypeName(tensor.dtype), ShapeToCompactString(tensor.shape),
                         " (sharding unknown: describe has no value '", tensor.name, "')"),
            ""};
  }
  return {found->type_str(), found->visualization()};
}

}  // namespace client
}  // namespace meshserve
