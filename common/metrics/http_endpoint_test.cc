#include "common/metrics/http_endpoint.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
  EXPECT_FALSE(http.https());
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

// The kernel's cap on a listening socket's backlog.
int SoMaxConn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  return in >> value ? value : 4096;
}

TEST(HttpEndpointTest, ListenBacklogRaisedAboveHttplibsFive) {
  MetricRegistry registry;
  HttpEndpoint http(&registry);
  EXPECT_THAT(http.ListenBacklog().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(http.Start("127.0.0.1", 0), IsOk());
  absl::StatusOr<int> backlog = http.ListenBacklog();
  ASSERT_THAT(backlog.status(), IsOk());
  EXPECT_EQ(*backlog, std::min(HttpEndpoint::kListenBacklog, SoMaxConn()));
  // A burst of clients connecting at once is served whole.
  constexpr int kClients = 64;
  std::vector<int> statuses(kClients, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", http.port());
      client.set_connection_timeout(5);
      auto res = client.Get("/metrics");
      statuses[i] = res ? res->status : -1;
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(statuses[i], 200) << "client " << i;
}

TEST(HttpEndpointTest, BusyPortIsUnavailable) {
  MetricRegistry registry;
  HttpEndpoint first(&registry);
  ASSERT_THAT(first.Start("127.0.0.1", 0), IsOk());
  HttpEndpoint second(&registry);
  EXPECT_THAT(second.Start("127.0.0.1", first.port()),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(HttpEndpointTest, CreateWithoutFilesIsPlaintext) {
  MetricRegistry registry;
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> http = HttpEndpoint::Create(&registry, {});
  ASSERT_THAT(http.status(), IsOk());
  EXPECT_FALSE((*http)->https());
  EXPECT_STREQ((*http)->scheme_description(), "plaintext");
  ASSERT_THAT((*http)->Start("127.0.0.1", 0), IsOk());
  httplib::Client client("127.0.0.1", (*http)->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

// Two clusters' certificates (scripts/make-dev-certs.sh) in a fresh directory.
class HttpsEndpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = absl::StrCat(::testing::TempDir(), "/http_endpoint_test.XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << pattern;
    root_ = new std::string(pattern);
    for (const char* name : {"certs", "other_ca"}) {
      const std::string command =
          absl::StrCat("sh '", MESHSERVE_SOURCE_DIR, "/scripts/make-dev-certs.sh' '", *root_,
                       "/", name, "' >/dev/null");
      ASSERT_EQ(std::system(command.c_str()), 0) << command;
    }
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf '", *root_, "'").c_str());
    delete root_;
  }
  static std::string Path(const std::string& name) { return absl::StrCat(*root_, "/", name); }
  static HttpsFiles Member() { return {Path("certs/member.pem"), Path("certs/member.key")}; }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // An HTTPS endpoint on a free port serving /hello.
  std::unique_ptr<HttpEndpoint> StartHttps() {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> http =
        HttpEndpoint::Create(&registry_, Member(), [this] { scrapes_.Set({}, ++before_); });
    EXPECT_THAT(http.status(), IsOk());
    if (!http.ok()) return nullptr;
    (*http)->server().Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hi", "text/plain");
    });
    EXPECT_THAT((*http)->Start("127.0.0.1", 0), IsOk());
    return std::move(*http);
  }
  // A client verifying the server against `ca` (no client certificate).
  static std::unique_ptr<httplib::SSLClient> Client(const std::string& host, int port,
                                                    const std::string& ca) {
    auto client = std::make_unique<httplib::SSLClient>(host, port);
    client->set_ca_cert_path(ca.c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(10);
    return client;
  }

  static std::string* root_;
  MetricRegistry registry_;
  Gauge& scrapes_ = registry_.AddGauge("scrapes", "Scrapes so far.");
  int before_ = 0;
};
std::string* HttpsEndpointTest::root_ = nullptr;

TEST_F(HttpsEndpointTest, ServesOverTlsToClientsTrustingTheCa) {
  std::unique_ptr<HttpEndpoint> http = StartHttps();
  ASSERT_NE(http, nullptr);
  EXPECT_TRUE(http->https());
  EXPECT_STREQ(http->scheme_description(), "https");
  // The member certificate's SANs: 127.0.0.1 and localhost both verify.
  for (const char* host : {"127.0.0.1", "localhost"}) {
    auto client = Client(host, http->port(), Path("certs/ca.pem"));
    auto metrics = client->Get("/metrics");
    ASSERT_TRUE(metrics) << host << ": " << httplib::to_string(metrics.error())
                         << " verify=" << client->get_openssl_verify_result();
    EXPECT_EQ(metrics->status, 200);
    EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
    auto hello = client->Get("/hello");
    ASSERT_TRUE(hello);
    EXPECT_EQ(hello->body, "hi");
  }
  EXPECT_EQ(before_, 2);  // before_scrape ran once per /metrics
  auto metrics = Client("127.0.0.1", http->port(), Path("certs/ca.pem"))->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("\nscrapes 3\n"));
  http->Stop();
  http->Stop();
}

TEST_F(HttpsEndpointTest, PlaintextClientGetsNoAnswer) {
  std::unique_ptr<HttpEndpoint> http = StartHttps();
  ASSERT_NE(http, nullptr);
  httplib::Client plain("127.0.0.1", http->port());
  plain.set_read_timeout(10);
  auto res = plain.Get("/metrics");
  EXPECT_FALSE(res) << "status " << res->status;
  // The server keeps serving TLS clients afterwards.
  auto metrics = Client("127.0.0.1", http->port(), Path("certs/ca.pem"))->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST_F(HttpsEndpointTest, ClientTrustingAnotherCaFailsVerification) {
  std::unique_ptr<HttpEndpoint> http = StartHttps();
  ASSERT_NE(http, nullptr);
  auto client = Client("127.0.0.1", http->port(), Path("other_ca/ca.pem"));
  auto res = client->Get("/metrics");
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error(), httplib::Error::SSLServerVerification);
  EXPECT_EQ(before_, 0);  // no request reached the handler
}

TEST_F(HttpsEndpointTest, BadFilesNameTheFile) {
  const HttpsFiles member = Member();
  const std::string missing = Path("missing.pem");
  const std::string junk = Path("junk.pem");
  Write(junk, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
  const std::string encrypted = Path("encrypted.key");
  ASSERT_EQ(std::system(absl::StrCat("openssl pkey -in '", member.key_file,
                                     "' -aes256 -passout pass:secret -out '", encrypted,
                                     "' 2>/dev/null")
                            .c_str()),
            0);
  struct Case {
    HttpsFiles files;
    absl::StatusCode code;
    std::string named;
    std::string says;
  };
  const Case cases[] = {
      {{missing, member.key_file}, absl::StatusCode::kInvalidArgument, missing, "cannot read"},
      {{member.cert_file, missing}, absl::StatusCode::kInvalidArgument, missing, "cannot read"},
      {{junk, member.key_file}, absl::StatusCode::kInvalidArgument, junk, "no PEM certificate"},
      {{member.key_file, member.key_file}, absl::StatusCode::kInvalidArgument,
       member.key_file, "no PEM certificate"},
      {{member.cert_file, junk}, absl::StatusCode::kInvalidArgument, junk, "private key"},
      {{member.cert_file, member.cert_file}, absl::StatusCode::kInvalidArgument,
       member.cert_file, "private key"},
      {{member.cert_file, encrypted}, absl::StatusCode::kInvalidArgument, encrypted,
       "unencrypted"},
      // Another identity's key: named with the certificate it does not match.
      {{member.cert_file, Path("certs/client.key")}, absl::StatusCode::kFailedPrecondition,
       Path("certs/client.key"), member.cert_file},
  };
  MetricRegistry registry;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.files.cert_file, " + ", c.files.key_file));
    const absl::Status status = HttpEndpoint::Create(&registry, c.files).status();
    EXPECT_THAT(status, StatusIs(c.code, c.named));
    EXPECT_THAT(status, StatusIs(c.code, c.says));
    EXPECT_EQ(CheckHttpsFiles(c.files), status);  // the same check, without a server
  }
  EXPECT_THAT(CheckHttpsFiles(member), IsOk());
}

}  // namespace
}  // namespace meshserve
