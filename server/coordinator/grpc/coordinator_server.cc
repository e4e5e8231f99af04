#include "server/coordinator/grpc/coordinator_server.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/coordinator/grpc/generate_service.h"

namespace meshserve {

CoordinatorServer::CoordinatorServer(Coordinator* coordinator, CoordinatorServerOptions options)
    : coordinator_(coordinator),
      options_(std::move(options)),
      inference_(coordinator, &gate_, &options_.edge),
      cluster_(coordinator, &gate_, &options_.edge),
      membership_(coordinator, &gate_, &options_.edge),
      generate_(std::make_unique<GenerateServiceImpl>(options_.generator, &gate_,
                                                      &options_.edge)) {}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Coordinator* coordinator, const std::string& host, int port,
    CoordinatorServerOptions options) {
  if (port < 0 || port > 65535) return InvalidArgument("port ", port, " not in 0..65535");
  MS_RETURN_IF_ERROR(ValidateRequestLimits(options.edge.limits));
  if (options.credentials == nullptr) options.credentials = grpc::InsecureServerCredentials();
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer(coordinator, std::move(options)));
  s->host_ = host;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // grpcurl-style listing
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(s->options_.edge.limits.max_request_bytes, INT32_MAX)));
  const std::string address = absl::StrCat(host, ":", port);
  builder.AddListeningPort(address, s->options_.credentials, &s->port_);
  builder.RegisterService(&s->inference_);
  builder.RegisterService(&s->cluster_);
  builder.RegisterService(&s->membership_);
  builder.RegisterService(s->generate_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return Unavailable("cannot listen on ", address);
  }
  s->UpdateHealth();
  return s;
}

std::string CoordinatorServer::address() const {
  return absl::StrCat(host_ == "0.0.0.0" ? "127.0.0.1" : host_, ":", port_);
}

void CoordinatorServer::UpdateHealth() {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", true);
  health->SetServingStatus("inference.GRPCInferenceService", coordinator_->IsReady());
}

bool CoordinatorServer::Drain(absl::Duration timeout) {
  if (server_ == nullptr) return true;
  // Later SetServingStatus calls (UpdateHealth) are ignored from here on.
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  gate_.Close();
  return gate_.WaitUntilEmpty(timeout);
}

void CoordinatorServer::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

}  // namespace meshserve
