#include "server/coordinator/http/status_json.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/sharding/shard_layout.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using Json = nlohmann::json;

// Index of `iv` in the sorted distinct intervals `all`.
int IndexOf(const std::vector<Interval>& all, const Interval& iv) {
  return static_cast<int>(std::find(all.begin(), all.end(), iv) - all.begin());
}

std::vector<Interval> Distinct(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

Json IntervalsJson(const std::vector<Interval>& v) {
  Json out = Json::array();
  for (const Interval& iv : v) out.push_back({iv.begin, iv.end});
  return out;
}

Json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count},
          {"mean_ms", s.mean * 1e3},
          {"p50_ms", s.p50 * 1e3},
          {"p90_ms", s.p90 * 1e3},
          {"p99_ms", s.p99 * 1e3}};
}

Json GenerationJson(const GenerationView& g) {
  return {{"running", g.running},
          {"waiting", g.waiting},
          {"tokens_generated", g.tokens_generated},
          {"time_to_first_token", LatencyJson(g.time_to_first_token)},
          {"inter_token", LatencyJson(g.inter_token)},
          {"kv_cache_bytes_used", g.kv_cache_bytes_used},
          {"kv_cache_bytes_capacity", g.kv_cache_bytes_capacity}};
}

Json WorkerJson(const WorkerView& w, absl::Time now) {
  Json placements = Json::array();
  for (const WorkerView::Hosted& h : w.placements) {
    placements.push_back({{"model", h.model}, {"generation", h.generation},
                          {"version", h.version}, {"devices", h.devices},
                          {"replica_devices", h.replica_devices}});
  }
  Json j = {{"id", w.info.worker_id},
            {"address", w.info.address},
            {"alive", w.info.alive},
            {"healthy", w.info.alive && w.status.ok()},
            {"suspect", w.info.suspect},
            {"draining", w.info.draining},
            {"warming", w.info.alive && w.info.warming},
            {"cores", w.info.cores},
            {"heartbeat_ms_ago", absl::ToInt64Milliseconds(now - w.info.last_heartbeat)},
            {"placements", placements}};
  int64_t param_bytes = 0;
  if (w.status.ok()) {
    for (const auto& m : w.status->models) param_bytes += m.param_bytes;
    j["blas_core"] = w.status->blas_core;
    j["requests_served"] = w.status->requests_served;
    j["programs"] = w.status->programs;
  }
  j["param_bytes"] = param_bytes;
  return j;
}

Json ParamJson(const ParamDef& p, const Placement& placement) {
  Json j = {{"name", p.name},
            {"shape", p.shape},
            {"dtype", std::string(DTypeName(p.dtype))},
            {"spec", p.sharding.ToString()}};
  absl::StatusOr<NamedSharding> sharding =
      NamedSharding::Create(placement.mesh, p.sharding, static_cast<int>(p.shape.size()));
  if (!sharding.ok()) {
    j["grid_error"] = std::string(sharding.status().message());
    return j;
  }
  const ShardingGrid grid = GridOfSharding(p.shape, *sharding);
  Json tiles = Json::array();
  for (const ShardingTile& t : grid.tiles) {
    tiles.push_back({{"row", t.row}, {"col", t.col}, {"devices", t.devices}});
  }
  j["grid"] = {{"rows", IntervalsJson(grid.rows)},
               {"cols", IntervalsJson(grid.cols)},
               {"tiles", tiles},
               {"folded_dims", grid.folded_dims}};
  return j;
}

Json ModelJson(const ModelStatus& m, const CoordinatorMetrics& metrics,
               const std::map<std::string, GenerationSnapshot>& generation) {
  Json j = {{"name", m.name},
            {"state", m.state},
            {"ready", m.ready},
            {"generation", m.generation},
            {"version", m.version},
            {"replicas", m.replicas},
            {"requests", metrics.requests.Value({m.name})},
            {"in_flight", metrics.in_flight.Value({m.name})}};
  if (auto g = generation.find(m.name); g != generation.end()) {
    j["text_generation"] = GenerationJson(SummarizeGeneration(g->second));
  }
  if (m.placement == nullptr || m.model == nullptr) return j;
  j["mesh"] = MeshText(m.placement->mesh);
  j["device_workers"] = m.placement->device_workers;
  Json params = Json::array();
  for (const ParamDef& p : m.model->params) params.push_back(ParamJson(p, *m.placement));
  j["params"] = params;
  Json steps = Json::array();
  for (const ScaleStep& step : m.scale_steps) {
    steps.push_back({{"generation", step.generation},
                     {"workers", step.workers},
                     {"seconds", step.seconds},
                     {"bytes_moved", step.stats.bytes_moved},
                     {"lower_bound_bytes", step.stats.lower_bound_bytes},
                     {"bytes_local", step.stats.bytes_local},
                     {"bytes_initialized", step.stats.bytes_initialized}});
  }
  j["scale_steps"] = steps;
  return j;
}

}  // namespace

ShardingGrid GridOfSharding(absl::Span<const int64_t> shape, const NamedSharding& sharding) {
  const std::vector<Box> boxes = ShardBoxesByDevice(shape, sharding);
  const int rank = static_cast<int>(shape.size());
  // Rank 1 is one row of columns along dim 0, as JAX draws it.
  const int row_dim = rank >= 2 ? 0 : -1;
  const int col_dim = rank >= 2 ? 1 : rank - 1;
  auto along = [&](const Box& b, int dim) { return dim >= 0 ? b[dim] : Interval{0, 1}; };
  ShardingGrid grid;
  grid.folded_dims = std::max(0, rank - 2);
  std::vector<Interval> rows, cols;
  for (const Box& b : boxes) {
    rows.push_back(along(b, row_dim));
    cols.push_back(along(b, col_dim));
  }
  grid.rows = Distinct(rows);
  grid.cols = Distinct(cols);
  std::map<std::pair<int, int>, std::vector<int64_t>> by_tile;
  for (size_t d = 0; d < boxes.size(); ++d) {
    by_tile[{IndexOf(grid.rows, rows[d]), IndexOf(grid.cols, cols[d])}].push_back(d);
  }
  for (auto& [rc, devices] : by_tile) grid.tiles.push_back({rc.first, rc.second, devices});
  return grid;
}

std::string MeshText(const Mesh& mesh) {
  std::vector<std::string> axes;
  for (int i = 0; i < mesh.num_axes(); ++i) {
    axes.push_back(absl::StrCat(mesh.axis(i).name, "=", mesh.axis(i).size));
  }
  return absl::StrJoin(axes, ", ");
}

LatencySummary SummarizeLatency(const HistogramSnapshot& h) {
  LatencySummary s;
  s.count = h.count;
  if (h.count <= 0) return s;
  s.mean = h.sum / static_cast<double>(h.count);
  s.p50 = HistogramQuantile(0.5, h);
  s.p90 = HistogramQuantile(0.9, h);
  s.p99 = HistogramQuantile(0.99, h);
  return s;
}

GenerationView SummarizeGeneration(const GenerationSnapshot& g) {
  GenerationView v;
  v.running = g.running;
  v.waiting = g.waiting;
  v.tokens_generated = g.tokens_generated;
  v.time_to_first_token = SummarizeLatency(g.time_to_first_token);
  v.inter_token = SummarizeLatency(g.inter_token);
  v.kv_cache_bytes_used = g.kv_cache_bytes_used;
  v.kv_cache_bytes_capacity = g.kv_cache_bytes_capacity;
  return v;
}

std::string ClusterStatusJson(const std::vector<WorkerView>& workers,
                              const std::vector<ModelStatus>& models,
                              const std::vector<RecentRequest>& recent,
                              const CoordinatorMetrics& metrics) {
  const absl::Time now = absl::Now();
  Json w = Json::array();
  for (const WorkerView& v : workers) w.push_back(WorkerJson(v, now));
  Json m = Json::array();
  const std::map<std::string, GenerationSnapshot> generation =
      GenerationMetrics::Snapshot(metrics.registry);
  for (const ModelStatus& s : models) m.push_back(ModelJson(s, metrics, generation));
  Json r = Json::array();
  for (const RecentRequest& q : recent) {
    r.push_back({{"age_ms", absl::ToInt64Milliseconds(now - q.finished)},
                 {"model", q.model},
                 {"id", q.id},
                 {"total_ms", q.total_ms},
                 {"compute_ms", q.compute_ms},
                 {"code", absl::StatusCodeToString(q.code)},
                 {"error", q.error}});
  }
  return Json{{"workers", w}, {"models", m}, {"recent", r}}.dump();
}

}  // namespace meshserve
