// An HTTP server (Debian's cpp-httplib) on HOST:PORT, run on a thread of its
// own, that serves GET /metrics (a MetricRegistry's Prometheus exposition).
// Its owner adds further routes to server() before Start: the coordinator its
// REST API and status page (server/coordinator/http/), the worker nothing.
//
//   HttpEndpoint http(&registry);
//   http.server().Get("/hello", ...);
//   MS_RETURN_IF_ERROR(http.Start("127.0.0.1", 8000));  // port 0: any free port
//
// `before_scrape`, when set, runs at the start of each /metrics request (to
// refresh gauges that are read from elsewhere, e.g. worker health).
//
// Thread-safety: Start and Stop from one thread (the owner's); handlers run on
// cpp-httplib's pool, so routes must be thread-safe. Stop (and the destructor)
// waits for the listener thread.
#ifndef MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_
#define MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "common/metrics/metric_registry.h"
#include "httplib.h"

namespace meshserve {

class HttpEndpoint {
 public:
  explicit HttpEndpoint(const MetricRegistry* registry,
                        std::function<void()> before_scrape = nullptr);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  httplib::Server& server() { return server_; }
  // Binds and starts serving. \error kUnavailable when the port cannot be bound.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

 private:
  const MetricRegistry* const registry_;
  const std::function<void()> before_scrape_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_
