// The coordinator's gRPC server: inference.GRPCInferenceService,
// meshserve.ClusterService, meshserve.MembershipService,
// meshserve.GenerateService (generate_service.h; FAILED_PRECONDITION without
// options.generator) and the standard
// grpc.health.v1 service ("" is SERVING while the process runs;
// "inference.GRPCInferenceService" is SERVING once IsReady()), with 1 GiB
// message limits, except that a received message may have at most
// options.edge.limits.max_request_bytes (RESOURCE_EXHAUSTED above it). The
// port serves `options.credentials` (null: insecure); edge_auth.h says who
// may call what.
//
// Thread-safety: Start/Drain/Shutdown from one thread; UpdateHealth from any.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_COORDINATOR_SERVER_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_COORDINATOR_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/call_gate.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/grpc/cluster_service.h"
#include "server/coordinator/grpc/edge_auth.h"
#include "server/coordinator/grpc/inference_service.h"

namespace meshserve {

class Generator;
class GenerateServiceImpl;  // generate_service.h (kept out of this header: generate_call.h)

struct CoordinatorServerOptions {
  // RpcSecurity::ClientPortServerCredentials with --tls_dir; null: insecure.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  EdgeOptions edge;
  // Serves meshserve.GenerateService over it; must outlive the server. Null:
  // Generate answers FAILED_PRECONDITION "generation is not enabled".
  Generator* generator = nullptr;
};

class CoordinatorServer {
 public:
  // Binds host:port (port 0 picks a free one).
  // \error kUnavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      Coordinator* coordinator, const std::string& host, int port,
      CoordinatorServerOptions options = {});
  ~CoordinatorServer();
  int port() const { return port_; }
  std::string address() const;
  // Sets the health service's statuses from coordinator->IsReady().
  void UpdateHealth();
  grpc::Server* server() { return server_.get(); }
  // The first half of a stop that fails no call with CANCELLED (call_gate.h):
  // health NOT_SERVING, every later call answered kUnavailable; waits up to
  // `timeout` for the calls inside the handlers to end and says whether they
  // did. The process may then exit without Shutdown (coordinator_main.cc).
  bool Drain(absl::Duration timeout);
  // Stops the gRPC server; calls still running after 2 s are cancelled.
  void Shutdown();

 private:
  CoordinatorServer(Coordinator* coordinator, CoordinatorServerOptions options);
  Coordinator* const coordinator_;
  const CoordinatorServerOptions options_;  // before the services, which point into it
  std::string host_;
  int port_ = 0;
  CallGate gate_{"coordinator"};  // before the services, which point to it
  InferenceService inference_;
  ClusterServiceImpl cluster_;
  MembershipServiceImpl membership_;
  std::unique_ptr<GenerateServiceImpl> generate_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_COORDINATOR_SERVER_H_
