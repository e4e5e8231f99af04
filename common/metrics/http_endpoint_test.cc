#include "common/metrics/http_endpoint.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(HttpEndpointTest, ServesMetricsAndOwnerRoutes) {
  MetricRegistry registry;
  Gauge& scrapes = registry.AddGauge("scrapes", "Scrapes so far.");
  int before = 0;
  HttpEndpoint http(&registry, [&] { scrapes.Set({}, ++before); });
  http.server().Get("/hello", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hi", "text/plain");
  });
  ASSERT_THAT(http.Start("127.0.0.1", 0), IsOk());
  ASSERT_GT(http.port(), 0);
  httplib::Client client("127.0.0.1", http.port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("\nscrapes 1\n"));
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  auto hello = client.Get("/hello");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hi");
  http.Stop();
  http.Stop();  // idempotent
}

TEST(HttpEndpointTest, BusyPortIsUnavailable) {
  MetricRegistry registry;
  HttpEndpoint first(&registry);
  ASSERT_THAT(first.Start("127.0.0.1", 0), IsOk());
  HttpEndpoint second(&registry);
  EXPECT_THAT(second.Start("127.0.0.1", first.port()),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace meshserve
