// The status page's data (GET /v1/status): workers with health and load,
// models with their mesh ("data=2, model=4") and, for each param of a placed
// model, its sharding as a device grid, plus the recent requests.
//
// Generation. A model that generates also gets "text_generation": sequences
// running and waiting, tokens generated, time to first token and inter-token
// latency (count, mean and the p50/p90/p99 that Prometheus'
// histogram_quantile gives from the buckets, in ms) and KV cache bytes used
// and capacity. The numbers are the meshserve_generation_* families
// (server/coordinator/generate/generation_metrics.h) read back from the
// coordinator's registry as numbers (GenerationMetrics::Snapshot), so the page
// and /metrics always agree; the quantiles are HistogramQuantile's
// (common/metrics/metric_registry.h).
//
// ShardingGrid is the layout jax.debug.visualize_array_sharding draws
// (common/sharding/visualize.h draws it as text): rank 2, rows are the
// distinct shards along dim 0 and columns those along dim 1, each tile the
// devices holding that box; rank 1 is one row; rank 0 one tile. Rank > 2 is
// drawn over its first two dims (later dims' shards fold into the tiles'
// device lists), and says so (`folded_dims`).
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_JSON_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/metrics/metric_registry.h"
#include "common/sharding/box.h"
#include "common/sharding/named_sharding.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/generate/generation_metrics.h"

namespace meshserve {

struct ShardingTile {
  int row = 0;
  int col = 0;
  std::vector<int64_t> devices;  // ascending
};

struct ShardingGrid {
  std::vector<Interval> rows;  // along dim 0 (one [0, 1) row for rank <= 1)
  std::vector<Interval> cols;  // along dim 1 (dim 0 for rank 1; one for rank 0)
  std::vector<ShardingTile> tiles;
  int folded_dims = 0;  // dims past the second, not drawn
};

// Precondition: shape.size() == sharding.rank() (the model's own params).
ShardingGrid GridOfSharding(absl::Span<const int64_t> shape, const NamedSharding& sharding);

// "data=2, model=4"
std::string MeshText(const Mesh& mesh);

// One latency histogram, summarised (seconds).
struct LatencySummary {
  int64_t count = 0;
  double mean = 0;  // sum / count (0 without observations)
  double p50 = 0, p90 = 0, p99 = 0;
};

// One model's generation numbers.
struct GenerationView {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t tokens_generated = 0;
  LatencySummary time_to_first_token;
  LatencySummary inter_token;
  int64_t kv_cache_bytes_used = 0;
  int64_t kv_cache_bytes_capacity = 0;
};

// Count, mean and quantiles of one latency histogram.
LatencySummary SummarizeLatency(const HistogramSnapshot& h);
// A model's generation numbers, the histograms summarised.
GenerationView SummarizeGeneration(const GenerationSnapshot& g);

// The JSON of GET /v1/status.
std::string ClusterStatusJson(const std::vector<WorkerView>& workers,
                              const std::vector<ModelStatus>& models,
                              const std::vector<RecentRequest>& recent,
                              const CoordinatorMetrics& metrics);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_JSON_H_
