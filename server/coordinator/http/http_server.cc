#include "server/coordinator/http/http_server.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/grpc_credentials.h"
#include "server/coordinator/http/openai_response.h"
#include "server/coordinator/http/status_json.h"
#include "server/coordinator/http/status_page.h"

namespace meshserve {
namespace {

constexpr char kJson[] = "application/json";
// NAME, and an optional /versions/V (one version, "1", is served).
constexpr char kModel[] = R"(/v2/models/([^/]+)(?:/versions/[^/]+)?)";

void Send(const HttpReply& reply, httplib::Response& res) {
  res.status = reply.status;
  res.set_content(reply.body, kJson);
}

bool IsOpenPath(const std::string& path) {
  return path == "/v2/health/live" || path == "/v2/health/ready" || path == "/metrics";
}

// The guards' refusals: OpenAI's error shape on its routes, KServe's elsewhere.
// `http_status` 0: the status code's.
void SendError(const std::string& path, const absl::Status& status, httplib::Response& res,
               int http_status = 0) {
  if (absl::StartsWith(path, "/v1/") && path != "/v1/status") {  // OpenAI's API
    const OpenAiError error = http_status == 0 ? EncodeOpenAiError(status)
                                               : EncodeOpenAiError(status, http_status);
    res.status = error.http_status;
    res.set_content(error.body, kJson);
    return;
  }
  HttpReply reply = ErrorReply(status);
  if (http_status != 0) reply.status = http_status;
  Send(reply, res);
}

OpenAiRouteOptions OpenAiOptions(Coordinator* coordinator,
                                 const CoordinatorHttpOptions& options) {
  OpenAiRouteOptions out;
  out.generator = options.generator;
  out.detokenize = options.detokenize;
  out.model_names = [coordinator] {
    std::vector<std::string> names;
    for (const ModelStatus& m : coordinator->ModelStatuses()) names.push_back(m.name);
    return names;
  };
  return out;
}

}  // namespace

CoordinatorHttpServer::CoordinatorHttpServer(Coordinator* coordinator,
                                             CoordinatorHttpOptions options)
    : coordinator_(coordinator),
      options_(std::move(options)),
      rest_(coordinator, options_.limits),
      openai_(OpenAiOptions(coordinator, options_)) {}

absl::StatusOr<std::unique_ptr<CoordinatorHttpServer>> CoordinatorHttpServer::Start(
    Coordinator* coordinator, const std::string& host, int port,
    CoordinatorHttpOptions options) {
  if (absl::Status valid = ValidateRequestLimits(options.limits); !valid.ok()) return valid;
  if (options.num_threads < 1) {
    return InvalidArgument("http num_threads must be >= 1, got ", options.num_threads);
  }
  std::unique_ptr<CoordinatorHttpServer> server(
      new CoordinatorHttpServer(coordinator, std::move(options)));
  CoordinatorHttpServer* const self = server.get();
  MS_ASSIGN_OR_RETURN(server->endpoint_,
                      HttpEndpoint::Create(&coordinator->metrics().registry,
                                           server->options_.https,
                                           [self] { self->RefreshWorkerGauges(); }));
  const size_t num_threads = static_cast<size_t>(server->options_.num_threads);
  server->endpoint_->server().new_task_queue = [num_threads] {
    return new httplib::ThreadPool(num_threads);
  };
  server->AddGuards();
  server->AddRoutes();
  absl::Status started = server->endpoint_->Start(host, port);
  if (!started.ok()) return started;
  return server;
}

void CoordinatorHttpServer::AddRoutes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  httplib::Server& s = endpoint_->server();
  s.Get("/v2/health/live", [this](Req, Res res) { Send(rest_.Live(), res); });
  s.Get("/v2/health/ready", [this](Req, Res res) { Send(rest_.Ready(), res); });
  s.Get("/v2", [this](Req, Res res) { Send(rest_.ServerMetadata(), res); });
  s.Get(kModel, [this](Req req, Res res) { Send(rest_.ModelMetadata(req.matches[1]), res); });
  s.Get(absl::StrCat(kModel, "/ready"),
        [this](Req req, Res res) { Send(rest_.ModelReady(req.matches[1]), res); });
  s.Post(absl::StrCat(kModel, "/infer"),
         [this](Req req, Res res) { Send(rest_.Infer(req.matches[1], req.body), res); });
  s.Get("/", [](Req, Res res) {
    res.set_content(std::string(StatusPageHtml()), "text/html; charset=utf-8");
  });
  s.Get("/v1/status", [this](Req, Res res) {
    res.set_content(ClusterStatusJson(coordinator_->Workers(), coordinator_->ModelStatuses(),
                                      coordinator_->metrics().recent.List(),
                                      coordinator_->metrics()),
                    kJson);
  });
  openai_.Register(s);
  // Unrouted paths and methods; the handlers' own errors already have a body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](Req req, Res res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413) {  // cpp-httplib refused the body (payload_max_length)
      SendError(req.path,
                absl::ResourceExhaustedError(absl::StrCat(
                    "request body of ", req.get_header_value("Content-Length"),
                    " bytes exceeds --max_request_bytes=", options_.limits.max_request_bytes)),
                res, 413);
      return httplib::Server::HandlerResponse::Handled;
    }
    SendError(req.path,
              absl::NotFoundError(absl::StrCat("no route for ", req.method, " ", req.path)),
              res);
    return httplib::Server::HandlerResponse::Handled;
  }));
}

void CoordinatorHttpServer::AddGuards() {
  httplib::Server& s = endpoint_->server();
  s.set_payload_max_length(static_cast<size_t>(options_.limits.max_request_bytes));
  if (options_.auth_token.empty()) return;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (IsOpenPath(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string value = req.get_header_value("Authorization");
    absl::Status auth = CheckAuthorization(
        req.has_header("Authorization") ? std::optional<absl::string_view>(value) : std::nullopt,
        options_.auth_token);
    if (auth.ok()) return httplib::Server::HandlerResponse::Unhandled;
    SendError(req.path, auth, res);
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
}

void CoordinatorHttpServer::RefreshWorkerGauges() {
  CoordinatorMetrics& m = coordinator_->metrics();
  m.worker_up.Clear();
  m.worker_suspect.Clear();
  m.worker_draining.Clear();
  for (const WorkerInfo& w : coordinator_->registry().AllWorkers()) {
    const LabelValues labels = {absl::StrCat(w.worker_id), w.address};
    m.worker_up.Set(labels, w.alive ? 1 : 0);
    m.worker_suspect.Set(labels, w.suspect ? 1 : 0);
    m.worker_draining.Set(labels, w.draining ? 1 : 0);
  }
}

}  // namespace meshserve
