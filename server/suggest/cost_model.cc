// The suggest cost model (cost_model.h).
#include "server/suggest/cost_model.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "common/base/status_macros.h"
#include "server/compiler/compiler.h"

namespace meshserve {
namespace {

// Bytes of one device's box of `type` (even shards).
int64_t LocalBytes(const ArrayType& type) {
  int64_t n = DTypeSize(type.dtype);
  for (int i = 0; i < type.rank(); ++i) {
    n *= type.shape[i] / std::max<int64_t>(1, type.sharding.NumShardsAlongDim(i));
  }
  return n;
}

// A dot layer's rows per device: its result's local elements over the last dim.
int64_t LocalRows(const ArrayType& type) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < type.rank(); ++i) {
    rows *= type.shape[i] / std::max<int64_t>(1, type.sharding.NumShardsAlongDim(i));
  }
  return rows;
}

double GemmRate(int64_t rows, const CostFigures& f) {
  const double gflops = rows <= 1                    ? f.gemm_gflops_one_row
                        : rows <= f.small_m_max_rows ? f.gemm_gflops_small_m
                                                     : f.gemm_gflops_large_m;
  return gflops * 1e9;
}

std::string TypesKey(const TypedModel& typed, const Mesh& mesh) {
  auto kept = [&](const std::vector<std::string>& axes) {
    std::vector<std::string> out;
    for (const std::string& a : axes) {
      for (const MeshAxis& m : mesh.axes()) {
        if (m.name == a && m.size > 1) out.push_back(a);
      }
    }
    return absl::StrJoin(out, ",");
  };
  std::string key = mesh.ToString();
  for (const auto& [name, type] : typed.types) {
    absl::StrAppend(&key, ";", name, ":", absl::StrJoin(type.shape, ","), "/");
    for (const PartitionSpec::Entry& e : type.spec().entries()) absl::StrAppend(&key, kept(e), "|");
    absl::StrAppend(&key, "U", kept(type.spec().unreduced()));
  }
  return key;
}

}  // namespace

double HostSlowdown(const CostFigures& figures, int64_t num_workers) {
  if (figures.host_cores <= 0) return 1.0;
  const int64_t on_host = figures.workers_per_host > 0
                              ? std::min(num_workers, figures.workers_per_host)
                              : num_workers;
  const double demand =
      static_cast<double>(on_host * std::max<int64_t>(1, figures.threads_per_worker));
  return std::max(1.0, demand / static_cast<double>(figures.host_cores));
}

double LayerComputeMs(const LayerPlanInfo& layer, const ArrayType* result,
                      const CostFigures& figures) {
  if (!layer.op.has_value()) return 0;  // the outputs' gather: network only
  if (layer.max_device_flops > 0) {
    const int64_t rows = result != nullptr ? LocalRows(*result) : 1;
    return static_cast<double>(layer.max_device_flops) / GemmRate(rows, figures) * 1e3;
  }
  if (result == nullptr) return 0;
  return 3.0 * static_cast<double>(LocalBytes(*result)) / figures.memory_bytes_per_s * 1e3;
}

double LayerPredictedMs(const LayerPlanInfo& layer, const ArrayType* result,
                        const CostFigures& figures, int64_t num_workers) {
  int64_t rounds = 0;
  for (const CollectiveInfo& c : layer.collectives) rounds += c.rounds;
  const double n = static_cast<double>(std::max<int64_t>(1, num_workers));
  return HostSlowdown(figures, num_workers) * LayerComputeMs(layer, result, figures) +
         static_cast<double>(layer.bytes_moved) / (n * figures.link_bytes_per_s) * 1e3 +
         static_cast<double>(rounds) * figures.hop_ms;
}

CompileOptions CompileOptionsFor(const CostFigures& figures) {
  CompileOptions options;
  options.reshard.cost.link_bytes_per_s = figures.link_bytes_per_s;
  options.reshard.cost.hop_s = figures.hop_ms / 1e3;
  return options;
}

int64_t ParamBytesPerDevice(const TypedModel& typed) {
  int64_t total = 0;
  for (const ParamDef& p : typed.model.params) {
    if (const ArrayType* t = typed.Find(p.name)) total += LocalBytes(*t);
  }
  return total;
}

absl::StatusOr<Prediction> PredictAtShape(const ModelFile& model, const Mesh& mesh,
                                          const ShapeSet& shapes, const CostFigures& figures) {
  MS_ASSIGN_OR_RETURN(TypedModel typed, TypeModel(model, mesh, shapes));
  std::vector<int64_t> workers(mesh.num_devices());
  std::iota(workers.begin(), workers.end(), 0);
  MS_ASSIGN_OR_RETURN(CompiledPlan plan,
                      CompileModel(typed, workers, CompileOptionsFor(figures)));
  Prediction p;
  p.param_bytes_per_worker = ParamBytesPerDevice(typed);
  p.types_key = TypesKey(typed, mesh);
  double compute_ms = 0;
  for (const LayerPlanInfo& layer : plan.layers) {
    for (const CollectiveInfo& c : layer.collectives) p.rounds += c.rounds;
    p.bytes_per_request += layer.bytes_moved;
    compute_ms += LayerComputeMs(layer, typed.Find(layer.layer), figures);
  }
  for (const auto& [name, shape] : shapes) {
    if (const ArrayType* t = typed.Find(name)) p.bytes_per_request += t->NumBytes();
  }
  for (const std::string& out : model.outputs) {
    if (const ArrayType* t = typed.Find(out)) p.bytes_per_request += t->NumBytes();
  }
  const double n = static_cast<double>(mesh.num_devices());
  const double slowdown = HostSlowdown(figures, mesh.num_devices());
  p.gemm_ms = slowdown * compute_ms;
  p.network_ms = static_cast<double>(p.bytes_per_request) / (n * figures.link_bytes_per_s) * 1e3 +
                 static_cast<double>(p.rounds) * figures.hop_ms;
  p.memory_ms = slowdown * static_cast<double>(p.param_bytes_per_worker) /
                figures.memory_bytes_per_s * 1e3;
  p.predicted_ms = figures.request_overhead_ms + p.gemm_ms + p.network_ms + p.memory_ms;
  return p;
}

}  // namespace meshserve
