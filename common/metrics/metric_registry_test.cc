#include "common/metrics/metric_registry.h"

#include <cmath>
#include <map>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MetricRegistryTest, CounterExpositionWithLabels) {
  MetricRegistry registry;
  Counter& requests = registry.AddCounter("meshserve_inference_requests_total",
                                          "Requests answered.", {"model"});
  requests.Increment({"swiglu"});
  requests.Increment({"swiglu"}, 2);
  requests.Increment({"linear"});
  EXPECT_EQ(registry.Exposition(),
            "# HELP meshserve_inference_requests_total Requests answered.\n"
            "# TYPE meshserve_inference_requests_total counter\n"
            "meshserve_inference_requests_total{model=\"linear\"} 1\n"
            "meshserve_inference_requests_total{model=\"swiglu\"} 3\n");
  EXPECT_EQ(requests.Value({"swiglu"}), 3);
  EXPECT_EQ(requests.Value({"other"}), 0);
}

TEST(MetricRegistryTest, CounterIgnoresNegativeDeltas) {
  MetricRegistry registry;
  Counter& c = registry.AddCounter("c_total", "c");
  c.Increment({}, 5);
  c.Increment({}, -2);
  EXPECT_EQ(c.Value({}), 5);
  EXPECT_THAT(registry.Exposition(), HasSubstr("\nc_total 5\n"));
}

TEST(MetricRegistryTest, GaugeSetAddClear) {
  MetricRegistry registry;
  Gauge& g = registry.AddGauge("meshserve_worker_up", "1 when alive.", {"worker", "address"});
  g.Set({"0", "127.0.0.1:1"}, 1);
  g.Add({"1", "127.0.0.1:2"}, 0.5);
  g.Add({"1", "127.0.0.1:2"}, -1.5);
  EXPECT_EQ(registry.Exposition(),
            "# HELP meshserve_worker_up 1 when alive.\n"
            "# TYPE meshserve_worker_up gauge\n"
            "meshserve_worker_up{worker=\"0\",address=\"127.0.0.1:1\"} 1\n"
            "meshserve_worker_up{worker=\"1\",address=\"127.0.0.1:2\"} -1\n");
  g.Clear();
  EXPECT_EQ(registry.Exposition(),
            "# HELP meshserve_worker_up 1 when alive.\n# TYPE meshserve_worker_up gauge\n");
}

TEST(MetricRegistryTest, EscapesLabelValuesAndHelp) {
  MetricRegistry registry;
  Counter& c = registry.AddCounter("x_total", "a \\ b\nc \"q\"", {"model"});
  c.Increment({"a\"b\\c\nd"});
  EXPECT_EQ(registry.Exposition(),
            "# HELP x_total a \\\\ b\\nc \"q\"\n"
            "# TYPE x_total counter\n"
            "x_total{model=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricRegistryTest, HistogramBucketsAreCumulative) {
  MetricRegistry registry;
  Histogram& h = registry.AddHistogram("lat_seconds", "Latency.", {"model"}, {0.1, 1});
  h.Observe({"m"}, 0.05);
  h.Observe({"m"}, 0.1);  // le is inclusive
  h.Observe({"m"}, 0.5);
  h.Observe({"m"}, 3);
  EXPECT_EQ(registry.Exposition(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
            "lat_seconds_bucket{model=\"m\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{model=\"m\"} 3.65\n"
            "lat_seconds_count{model=\"m\"} 4\n");
  EXPECT_EQ(h.Count({"m"}), 4);
  EXPECT_DOUBLE_EQ(h.Sum({"m"}), 3.65);
  // The snapshot holds the numbers the _bucket lines print.
  const std::map<LabelValues, HistogramSnapshot> snapshot = h.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  const HistogramSnapshot& s = snapshot.at({"m"});
  EXPECT_THAT(s.bounds, ElementsAre(0.1, 1));
  EXPECT_THAT(s.cumulative, ElementsAre(2, 3, 4));
  EXPECT_DOUBLE_EQ(s.sum, 3.65);
  EXPECT_EQ(s.count, 4);
}

TEST(MetricRegistryTest, ScalarValuesAndFindByName) {
  MetricRegistry registry;
  Gauge& g = registry.AddGauge("g", "g", {"model", "state"});
  registry.AddHistogram("h_seconds", "h", {"model"});
  g.Set({"a", "used"}, 3);
  g.Set({"b", "used"}, 4);
  EXPECT_EQ(registry.Find<Gauge>("g"), &g);
  EXPECT_EQ(registry.Find<ScalarFamily>("g"), &g);
  EXPECT_EQ(registry.Find<Histogram>("g"), nullptr);  // not a histogram
  EXPECT_EQ(registry.Find<Gauge>("missing"), nullptr);
  ASSERT_NE(registry.Find<Histogram>("h_seconds"), nullptr);
  EXPECT_TRUE(registry.Find<Histogram>("h_seconds")->Snapshot().empty());
  const std::map<LabelValues, double> values = g.Values();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values.at({"a", "used"}), 3);
  EXPECT_EQ(values.at({"b", "used"}), 4);
}

TEST(HistogramQuantileTest, InterpolatesInsideTheBucketAsPrometheusDoes) {
  // 10 observations: 2 <= 0.1, 4 in (0.1, 0.2], 4 in (0.2, 0.4].
  const HistogramSnapshot h{{0.1, 0.2, 0.4}, {2, 6, 10, 10}, 2.5, 10};
  // rank 5: 3 of the 4 in (0.1, 0.2] -> 0.1 + 0.1 * 3/4.
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.5, h), 0.175);
  // rank 1: half of the first bucket, which starts at 0.
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.1, h), 0.05);
  // rank 9.9: 0.2 + 0.2 * 3.9/4.
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.99, h), 0.395);
  // In the +Inf bucket: the last finite bound.
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.5, {{0.1}, {1, 4}, 9, 4}), 0.1);
  EXPECT_TRUE(std::isnan(HistogramQuantile(0.5, {{0.1}, {0, 0}, 0, 0})));
  EXPECT_TRUE(std::isnan(HistogramQuantile(0.5, HistogramSnapshot{})));
}

TEST(HistogramQuantileTest, AgreesWithTheObservationsOfAHistogram) {
  MetricRegistry registry;
  Histogram& h = registry.AddHistogram("q_seconds", "q", {}, {0.01, 0.02});
  for (double v : {0.005, 0.015, 0.02, 0.06}) h.Observe({}, v);
  // cumulative 1, 3, 4: rank 2 is half of the 2 in (0.01, 0.02] -> 0.015.
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.5, h.Snapshot().at({})), 0.015);
  EXPECT_DOUBLE_EQ(HistogramQuantile(0.99, h.Snapshot().at({})), 0.02);  // +Inf bucket
}

TEST(MetricRegistryTest, HistogramWithoutLabels) {
  MetricRegistry registry;
  Histogram& h = registry.AddHistogram("d_seconds", "d", {}, {1});
  h.Observe({}, 2);
  EXPECT_THAT(registry.Exposition(), HasSubstr("d_seconds_bucket{le=\"1\"} 0\n"
                                               "d_seconds_bucket{le=\"+Inf\"} 1\n"
                                               "d_seconds_sum 2\nd_seconds_count 1\n"));
}

TEST(MetricRegistryTest, FamiliesInRegistrationOrder) {
  MetricRegistry registry;
  registry.AddGauge("b", "b").Set({}, 1);
  registry.AddCounter("a_total", "a").Increment({});
  const std::string text = registry.Exposition();
  EXPECT_LT(text.find("# HELP b "), text.find("# HELP a_total "));
}

TEST(MetricRegistryTest, ConcurrentIncrementsAllCount) {
  MetricRegistry registry;
  Counter& c = registry.AddCounter("n_total", "n", {"model"});
  Histogram& h = registry.AddHistogram("n_seconds", "n", {"model"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        c.Increment({"m"});
        h.Observe({"m"}, 0.001);
        (void)registry.Exposition().size();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value({"m"}), 4000);
  EXPECT_EQ(h.Count({"m"}), 4000);
}

TEST(MetricRegistryTest, GlobalRegistryIsOneObject) {
  EXPECT_EQ(&GlobalMetricRegistry(), &GlobalMetricRegistry());
}

}  // namespace
}  // namespace meshserve
