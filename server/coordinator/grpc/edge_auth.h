// Who may call the coordinator's gRPC port, and what they may send: the
// policy every handler of InferenceService, ClusterService and
// MembershipService checks first (grpc.health.v1 and reflection stay open,
// for probes).
//   - client services (inference.GRPCInferenceService, meshserve.ClusterService):
//     with an auth token, "authorization: Bearer <token>" (AdmitClientCall:
//     UNAUTHENTICATED saying missing or wrong);
//   - MembershipService (workers joining): with TLS, a member certificate of
//     the cluster's CA (AdmitMemberCall: UNAUTHENTICATED without a
//     certificate, PERMISSION_DENIED naming a client's identity);
//   - ModelInfer: RequestLimits (request_limits.h; the byte limit is also the
//     server's max receive size, so gRPC rejects a larger message before
//     parsing it).
//
// Thread-safety: EdgeOptions is immutable after construction; the admissions
// are thread-safe (the gate is).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/rpc/call_gate.h"
#include "grpcpp/server_context.h"
#include "server/coordinator/request_limits.h"

namespace meshserve {

struct EdgeOptions {
  bool tls = false;        // MembershipService requires a member certificate
  std::string auth_token;  // non-empty: client services require it
  RequestLimits limits;
};

// The defaults: insecure, no token, default limits.
const EdgeOptions& DefaultEdgeOptions();

// Admits a call: `gate` first (kUnavailable once the server is stopping,
// call_gate.h), then the policy above. The pass must live until the handler
// returns (a callback handler: until just before it finishes the call).
absl::StatusOr<CallGate::Pass> AdmitClientCall(const EdgeOptions& edge, CallGate* gate,
                                               const grpc::ServerContextBase& context);
absl::StatusOr<CallGate::Pass> AdmitMemberCall(const EdgeOptions& edge, CallGate* gate,
                                               const grpc::ServerContextBase& context);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_EDGE_AUTH_H_
