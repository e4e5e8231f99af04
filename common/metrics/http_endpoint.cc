#include "common/metrics/http_endpoint.h"

#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace meshserve {

HttpEndpoint::HttpEndpoint(const MetricRegistry* registry, std::function<void()> before_scrape)
    : registry_(registry), before_scrape_(std::move(before_scrape)) {
  // cpp-httplib's default also sets SO_REUSEPORT, which would let a second
  // server bind a port already in use: keep SO_REUSEADDR only.
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (before_scrape_) before_scrape_();
    res.set_content(registry_->Exposition(), kPrometheusContentType);
  });
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

absl::Status HttpEndpoint::Start(const std::string& host, int port) {
  const bool bound = port == 0 ? (port_ = server_.bind_to_any_port(host)) > 0
                               : server_.bind_to_port(host, port);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", host, ":", port));
  }
  if (port != 0) port_ = port;
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  // stop() before the listener runs would be lost (and Stop's join would
  // hang): return once it runs.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!server_.is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return server_.is_running() ? absl::OkStatus()
                              : absl::InternalError(absl::StrCat("HTTP: ", host, ":", port_,
                                                                 " bound but not listening"));
}

void HttpEndpoint::Stop() {
  if (!thread_.joinable()) return;
  server_.stop();
  thread_.join();
}

}  // namespace meshserve
