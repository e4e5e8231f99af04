// Who may call the coordinator's gRPC port, and what they may send: the
// policy every handler of InferenceService, ClusterService and
// MembershipService checks first (grpc.health.v1 and reflection stay open,
// for probes).
//   - client services (inference.GRPCInferenceService, meshserve.ClusterService):
//     with an auth token, "authorization: Bearer <token>" (CheckClientCall:
//     UNAUTHENTICATED saying missing or wrong);
//   - MembershipService (workers joining): with TLS, a member certificate of
//     the cluster's CA (CheckMemberCall: UNAUTHENTICATED without a
//     certificate, PERMISSION_DENIED naming a client's identity);
//   - ModelInfer: RequestLimits (request_limits.h; the byte limit is also the
//     server's max receive size, so gRPC rejects a larger message before
//     parsing it).
//
// Thread-safety: immutable after construction; the checks are pure.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_

#include <string>

#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/coordinator/request_limits.h"

namespace meshserve {

struct EdgeOptions {
  bool tls = false;        // MembershipService requires a member certificate
  std::string auth_token;  // non-empty: client services require it
  RequestLimits limits;
};

// The defaults: insecure, no token, default limits.
const EdgeOptions& DefaultEdgeOptions();

grpc::Status CheckClientCall(const EdgeOptions& edge, const grpc::ServerContext& context);
grpc::Status CheckMemberCall(const EdgeOptions& edge, const grpc::ServerContext& context);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_
