// An HTTP server (Debian's cpp-httplib) on HOST:PORT, run on a thread of its
// own, that serves GET /metrics (a MetricRegistry's Prometheus exposition).
// Its owner adds further routes to server() before Start: the coordinator its
// REST API and status page (server/coordinator/http/), the worker nothing.
//
//   HttpEndpoint http(&registry);                       // plaintext HTTP
//   http.server().Get("/hello", ...);
//   MS_RETURN_IF_ERROR(http.Start("127.0.0.1", 8000));  // port 0: any free port
//
//   MS_ASSIGN_OR_RETURN(std::unique_ptr<HttpEndpoint> https,   // HTTPS
//                       HttpEndpoint::Create(&registry, HttpsFiles{"dir/member.pem",
//                                                                  "dir/member.key"}));
//
// HTTPS (--tls_dir: the member certificate): TLS 1.2 or later with the PEM
// certificate chain and key of HttpsFiles; clients are not asked for a
// certificate (the owner's bearer token, if any, authenticates them). A
// plaintext request to an HTTPS port fails its handshake and gets no answer.
// Creating an HTTPS endpoint ignores SIGPIPE process-wide (SSL_write to a
// client that has gone would raise it).
//
// `before_scrape`, when set, runs at the start of each /metrics request (to
// refresh gauges that are read from elsewhere, e.g. worker health).
//
// The listening socket's accept queue holds kListenBacklog connections (capped
// by the kernel's net.core.somaxconn): Debian's cpp-httplib listens with a
// backlog of 5, compiled into its library, so a burst of 16 clients got
// connection resets; Start raises it on the bound socket.
//
// Thread-safety: Start and Stop from one thread (the owner's); handlers run on
// cpp-httplib's pool, so routes must be thread-safe. Stop (and the destructor)
// waits for the listener thread.
#ifndef MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_
#define MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/metric_registry.h"
#include "httplib.h"

namespace meshserve {

// The identity an HTTPS endpoint serves.
struct HttpsFiles {
  std::string cert_file;  // PEM: the server certificate, then any intermediates
  std::string key_file;   // PEM: its private key, unencrypted
};

// Loads `files` as HttpEndpoint::Create does, without serving: lets a
// process refuse a bad identity at start-up, before other servers use it.
// \error as HttpEndpoint::Create.
absl::Status CheckHttpsFiles(const HttpsFiles& files);

class HttpEndpoint {
 public:
  // Plaintext HTTP.
  explicit HttpEndpoint(const MetricRegistry* registry,
                        std::function<void()> before_scrape = nullptr);
  // HTTPS with `https`, plaintext HTTP without. \error kInvalidArgument naming
  // the certificate or key file that cannot be read or holds no PEM
  // certificate / unencrypted private key; kFailedPrecondition naming both
  // when the key is not the certificate's.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Create(
      const MetricRegistry* registry, const std::optional<HttpsFiles>& https,
      std::function<void()> before_scrape = nullptr);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  httplib::Server& server() { return *server_; }
  bool https() const { return https_; }
  // "https" or "plaintext", for start-up lines.
  const char* scheme_description() const { return https_ ? "https" : "plaintext"; }
  // Binds and starts serving. \error kUnavailable when the port cannot be bound.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  // The accept queue's length limit the kernel applies to the listening
  // socket (TCP_INFO of a listening socket), for tests. \error kFailedPrecondition
  // before Start, kInternal when the kernel does not say.
  absl::StatusOr<int> ListenBacklog() const;
  void Stop();

  static constexpr int kListenBacklog = 1024;

 private:
  HttpEndpoint(const MetricRegistry* registry, std::function<void()> before_scrape,
               std::unique_ptr<httplib::Server> server, bool https);

  const MetricRegistry* const registry_;
  const std::function<void()> before_scrape_;
  const std::unique_ptr<httplib::Server> server_;
  const bool https_;
  int port_ = 0;
  int listen_socket_ = -1;  // set by the socket-options hook before bind
  std::thread thread_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_METRICS_HTTP_ENDPOINT_H_
