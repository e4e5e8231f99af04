#include "server/coordinator/http/status_json.h"

#include <map>
#include <string>

#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/generate/generation_metrics.h"

namespace meshserve {
namespace {

using ::meshserve::testing::MeshOrDie;
using ::meshserve::testing::ShardingOrDie;
using ::testing::ElementsAre;

TEST(GridOfShardingTest, RowsAlongDimZeroReplicatedAlongTheOtherAxis) {
  // P('x', None) on (x=2, y=2), shape (8, 8): as visualize.h draws it.
  const NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('x', None)", 2);
  const ShardingGrid g = GridOfSharding({8, 8}, s);
  EXPECT_THAT(g.rows, ElementsAre(Interval{0, 4}, Interval{4, 8}));
  EXPECT_THAT(g.cols, ElementsAre(Interval{0, 8}));
  ASSERT_EQ(g.tiles.size(), 2u);
  EXPECT_THAT(g.tiles[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(g.tiles[1].devices, ElementsAre(2, 3));
  EXPECT_EQ(g.tiles[1].row, 1);
  EXPECT_EQ(g.folded_dims, 0);
}

TEST(GridOfShardingTest, TwoDimensionalTiles) {
  const NamedSharding s = ShardingOrDie("mesh[x=2,y=2]", "P('y', 'x')", 2);
  const ShardingGrid g = GridOfSharding({4, 6}, s);
  EXPECT_THAT(g.rows, ElementsAre(Interval{0, 2}, Interval{2, 4}));
  EXPECT_THAT(g.cols, ElementsAre(Interval{0, 3}, Interval{3, 6}));
  ASSERT_EQ(g.tiles.size(), 4u);
  // Device 1 is (x=0, y=1): row 1 (y), column 0 (x).
  for (const ShardingTile& t : g.tiles) {
    if (t.devices == std::vector<int64_t>{1}) {
      EXPECT_EQ(t.row, 1);
      EXPECT_EQ(t.col, 0);
    }
  }
}

TEST(GridOfShardingTest, RankOneIsOneRowAndRankThreeFolds) {
  const std::string mesh = "mesh[x=2]";
  const ShardingGrid one = GridOfSharding({8}, ShardingOrDie(mesh, "P('x')", 1));
  EXPECT_EQ(one.rows.size(), 1u);
  EXPECT_EQ(one.cols.size(), 2u);
  const ShardingGrid three =
      GridOfSharding({2, 2, 4}, ShardingOrDie(mesh, "P(None, None, 'x')", 3));
  EXPECT_EQ(three.folded_dims, 1);
  ASSERT_EQ(three.tiles.size(), 1u);
  EXPECT_THAT(three.tiles[0].devices, ElementsAre(0, 1));
}

TEST(MeshTextTest, AsStatusWritesIt) {
  EXPECT_EQ(MeshText(MeshOrDie("mesh[data=2,model=4]")), "data=2, model=4");
}

TEST(ClusterStatusJsonTest, WorkersModelsAndRecent) {
  WorkerView w;
  w.info.worker_id = 3;
  w.info.address = "127.0.0.1:9";
  w.info.cores = 2;
  ModelStatus m;
  m.name = "linear";
  m.state = "waiting for workers (0/1)";
  RecentRequest r;
  r.model = "linear";
  r.total_ms = 1.5;
  r.code = absl::StatusCode::kNotFound;
  CoordinatorMetrics metrics;
  metrics.requests.Increment({"linear"}, 2);
  const auto j = nlohmann::json::parse(ClusterStatusJson({w}, {m}, {r}, metrics));
  EXPECT_EQ(j["workers"][0]["id"], 3);
  EXPECT_EQ(j["workers"][0]["alive"], true);
  EXPECT_EQ(j["workers"][0]["warming"], false);
  w.info.warming = true;
  EXPECT_EQ(nlohmann::json::parse(ClusterStatusJson({w}, {m}, {r}, metrics))["workers"][0]["warming"],
            true);
  EXPECT_EQ(j["models"][0]["name"], "linear");
  EXPECT_EQ(j["models"][0]["requests"], 2);
  EXPECT_FALSE(j["models"][0].contains("params"));  // not placed
  EXPECT_EQ(j["recent"][0]["code"], "NOT_FOUND");
}

TEST(SummarizeLatencyTest, MeanAndPrometheusQuantilesOfTheBuckets) {
  // 10 observations: 2 <= 0.1, 4 in (0.1, 0.2], 4 in (0.2, 0.4].
  const HistogramSnapshot h{{0.1, 0.2, 0.4}, {2, 6, 10, 10}, 2.5, 10};
  const LatencySummary s = SummarizeLatency(h);
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.mean, 0.25);
  // rank 5: 3 of the 4 in (0.1, 0.2] -> 0.1 + 0.1 * 3/4.
  EXPECT_DOUBLE_EQ(s.p50, 0.175);
  // rank 9: 0.2 + 0.2 * 3/4.
  EXPECT_DOUBLE_EQ(s.p90, 0.35);
  // rank 9.9: 0.2 + 0.2 * 3.9/4.
  EXPECT_DOUBLE_EQ(s.p99, 0.395);
  const LatencySummary none = SummarizeLatency(HistogramSnapshot{{0.1}, {0, 0}, 0, 0});
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.p50, 0);
}

TEST(GenerationViewsTest, ReadsEveryFamilyOfEachModel) {
  // The families by their /metrics names (generation_metrics.h), filled by hand.
  MetricRegistry registry;
  const std::string m = "a\"b";
  Gauge& sequences = registry.AddGauge("meshserve_generation_sequences", "s", {"model", "state"});
  sequences.Set({m, "running"}, 7);
  sequences.Set({m, "waiting"}, 2);
  registry.AddCounter("meshserve_generation_tokens_total", "t", {"model"}).Increment({m}, 120);
  Gauge& kv = registry.AddGauge("meshserve_generation_kv_cache_bytes", "k", {"model", "state"});
  kv.Set({m, "capacity"}, 1048576);
  kv.Set({m, "used"}, 65536);
  Histogram& itl = registry.AddHistogram("meshserve_generation_inter_token_seconds", "i",
                                         {"model"}, {0.01, 0.02});
  for (double seconds : {0.005, 0.015, 0.02, 0.06}) itl.Observe({m}, seconds);
  registry.AddCounter("meshserve_inference_requests_total", "other", {"model"})
      .Increment({"other"}, 3);
  const std::map<std::string, GenerationSnapshot> snapshot = GenerationMetrics::Snapshot(registry);
  ASSERT_EQ(snapshot.size(), 1u);
  const GenerationView g = SummarizeGeneration(snapshot.at(m));
  EXPECT_EQ(g.running, 7);
  EXPECT_EQ(g.waiting, 2);
  EXPECT_EQ(g.tokens_generated, 120);
  EXPECT_EQ(g.kv_cache_bytes_used, 65536);
  EXPECT_EQ(g.kv_cache_bytes_capacity, 1048576);
  EXPECT_EQ(g.inter_token.count, 4);
  EXPECT_DOUBLE_EQ(g.inter_token.mean, 0.025);
  // Cumulative 1, 3, 4: rank 2 of 4 is half of the 2 in (0.01, 0.02] -> 0.015.
  EXPECT_DOUBLE_EQ(g.inter_token.p50, 0.015);
  EXPECT_DOUBLE_EQ(g.inter_token.p99, 0.02);  // in the +Inf bucket
  EXPECT_EQ(g.time_to_first_token.count, 0);
}

TEST(GenerationViewsTest, NoGenerationFamiliesNoModels) {
  MetricRegistry registry;
  registry.AddCounter("meshserve_inference_requests_total", "r", {"model"}).Increment({"m"});
  EXPECT_TRUE(GenerationMetrics::Snapshot(registry).empty());
}

TEST(ClusterStatusJsonTest, GenerationNumbersOfAGeneratingModel) {
  CoordinatorMetrics metrics;
  GenerationMetrics generation(&metrics.registry);
  GenerationScheduler::Stats stats;
  stats.running = 3;
  stats.waiting = 1;
  stats.blocks_used = 5;
  stats.num_blocks = 20;
  generation.SetModelState("gpt2", stats, 4096);
  SequenceSink sink = generation.Observe("gpt2", nullptr, nullptr);
  SequenceEvent one, two, last;
  one.token_ids = {11};
  two.token_ids = {12, 13};
  last.finish = FinishReason::kLength;
  for (const SequenceEvent* e : {&one, &two, &one, &last}) sink(*e);
  ModelStatus gpt2, linear;
  gpt2.name = "gpt2";
  linear.name = "linear";
  const auto j = nlohmann::json::parse(ClusterStatusJson({}, {gpt2, linear}, {}, metrics));
  const auto& g = j["models"][0]["text_generation"];
  EXPECT_EQ(g["running"], 3);
  EXPECT_EQ(g["waiting"], 1);
  EXPECT_EQ(g["tokens_generated"], 4);
  EXPECT_EQ(g["kv_cache_bytes_used"], 5 * 4096);
  EXPECT_EQ(g["kv_cache_bytes_capacity"], 20 * 4096);
  EXPECT_EQ(g["time_to_first_token"]["count"], 1);
  EXPECT_EQ(g["inter_token"]["count"], 2);  // the tokens after the first event's
  EXPECT_LE(g["inter_token"]["p50_ms"].get<double>(), g["inter_token"]["p99_ms"].get<double>());
  EXPECT_FALSE(j["models"][1].contains("text_generation")) << j.dump();
}

}  // namespace
}  // namespace meshserve
