#include "server/coordinator/grpc/edge_auth.h"

#include "common/base/status_macros.h"
#include "common/rpc/grpc_credentials.h"

namespace meshserve {

const EdgeOptions& DefaultEdgeOptions() {
  static const EdgeOptions* const kDefault = new EdgeOptions();
  return *kDefault;
}

absl::StatusOr<CallGate::Pass> AdmitClientCall(const EdgeOptions& edge, CallGate* gate,
                                               const grpc::ServerContextBase& context) {
  MS_ASSIGN_OR_RETURN(CallGate::Pass pass, gate->Enter());
  if (!edge.auth_token.empty()) {
    MS_RETURN_IF_ERROR(CheckBearerToken(context.client_metadata(), edge.auth_token));
  }
  return pass;
}

absl::StatusOr<CallGate::Pass> AdmitMemberCall(const EdgeOptions& edge, CallGate* gate,
                                               const grpc::ServerContextBase& context) {
  MS_ASSIGN_OR_RETURN(CallGate::Pass pass, gate->Enter());
  if (edge.tls) MS_RETURN_IF_ERROR(CheckMemberPeer(*context.auth_context()));
  return pass;
}

}  // namespace meshserve
