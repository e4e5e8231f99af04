#include "server/coordinator/http/http_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
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

}  // namespace

CoordinatorHttpServer::CoordinatorHttpServer(Coordinator* coordinator)
    : coordinator_(coordinator),
      rest_(coordinator),
      endpoint_(&coordinator->metrics().registry, [this] { RefreshWorkerGauges(); }) {}

absl::StatusOr<std::unique_ptr<CoordinatorHttpServer>> CoordinatorHttpServer::Start(
    Coordinator* coordinator, const std::string& host, int port) {
  std::unique_ptr<CoordinatorHttpServer> server(new CoordinatorHttpServer(coordinator));
  server->AddRoutes();
  absl::Status started = server->endpoint_.Start(host, port);
  if (!started.ok()) return started;
  return server;
}

void CoordinatorHttpServer::AddRoutes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  httplib::Server& s = endpoint_.server();
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
  // Unrouted paths and methods; the handlers' own errors already have a body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](Req req, Res res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    Send(ErrorReply(absl::NotFoundError(absl::StrCat("no route for ", req.method, " ",
                                                      req.path))),
         res);
    return httplib::Server::HandlerResponse::Handled;
  }));
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
