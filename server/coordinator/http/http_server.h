// The coordinator's HTTP port (--http_port): KServe v2 REST (rest_handlers.h),
// Prometheus /metrics (coordinator_metrics.h), the status page at / and its
// data at /v1/status (status_page.h, status_json.h), and the OpenAI-compatible
// completions API (openai_routes.h). Routes only; every handler is one call
// into RestHandlers, OpenAiRoutes or the status functions.
//
//   GET  /v2/health/live   /v2/health/ready   /v2
//   GET  /v2/models/NAME[/versions/V]          /v2/models/NAME[/versions/V]/ready
//   POST /v2/models/NAME[/versions/V]/infer
//   GET  /metrics   /   /v1/status
//   POST /v1/completions   GET /v1/models      (options.generator; null: 503)
// Anything else: 404 {"error": "..."}. Refusals on /v1/ paths but /v1/status
// (401, 413 and unrouted ones included) have OpenAI's error shape.
//
// Options: with an auth token every path but /v2/health/live, /v2/health/ready
// and /metrics needs "Authorization: Bearer <token>" (401 {"error": ...}
// saying missing or wrong); a body over limits.max_request_bytes gets 413
// naming the limit and the Content-Length, an input over the limits 413 too.
// With options.https (the coordinator's --tls_dir: DIR/member.pem and
// DIR/member.key) the port serves HTTPS only (clients need no certificate;
// the token, if any, still applies); without, plaintext HTTP.
//
// Threads: options.num_threads serve connections (cpp-httplib's pool); a
// streamed completion holds one for as long as it streams.
//
// Thread-safety: handlers run on cpp-httplib's threads and call the
// thread-safe Coordinator and Generator; Start/Stop from the owner's thread.
// The Coordinator and the Generator must outlive the server.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_HTTP_SERVER_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/http_endpoint.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/http/openai_routes.h"
#include "server/coordinator/http/rest_handlers.h"
#include "server/coordinator/request_limits.h"

namespace meshserve {

struct CoordinatorHttpOptions {
  std::string auth_token;  // non-empty: required (see the top of the file)
  RequestLimits limits;
  std::optional<HttpsFiles> https;  // set: HTTPS with this identity
  // The OpenAI routes' generator (null: they answer 503) and detokenizer
  // (null: no tokenizer wired, completions' text is "").
  Generator* generator = nullptr;
  Detokenizer detokenize;
  int num_threads = 32;  // >= 1
};

class CoordinatorHttpServer {
 public:
  // Serves on host:port (0: any free port). \error kUnavailable (port taken);
  // for options.https, HttpEndpoint::Create's (a bad certificate or key file);
  // kInvalidArgument for num_threads < 1.
  static absl::StatusOr<std::unique_ptr<CoordinatorHttpServer>> Start(
      Coordinator* coordinator, const std::string& host, int port,
      CoordinatorHttpOptions options = {});
  int port() const { return endpoint_->port(); }
  bool https() const { return endpoint_->https(); }
  // "https" or "plaintext", for the start-up line.
  const char* scheme_description() const { return endpoint_->scheme_description(); }
  void Stop() { endpoint_->Stop(); }

 private:
  CoordinatorHttpServer(Coordinator* coordinator, CoordinatorHttpOptions options);
  void AddRoutes();
  // The token check and the body limit's message (before and after routing).
  void AddGuards();
  // Sets the per-worker gauges from the registry (before each scrape).
  void RefreshWorkerGauges();

  Coordinator* const coordinator_;
  const CoordinatorHttpOptions options_;
  const RestHandlers rest_;
  OpenAiRoutes openai_;
  std::unique_ptr<HttpEndpoint> endpoint_;  // set by Start
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_HTTP_SERVER_H_
