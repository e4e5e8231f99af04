#include "server/coordinator/grpc/edge_auth.h"

#include "common/rpc/grpc_credentials.h"
#include "common/rpc/grpc_status.h"

namespace meshserve {

const EdgeOptions& DefaultEdgeOptions() {
  static const EdgeOptions* const kDefault = new EdgeOptions();
  return *kDefault;
}

grpc::Status CheckClientCall(const EdgeOptions& edge, const grpc::ServerContext& context) {
  if (edge.auth_token.empty()) return grpc::Status::OK;
  return ToGrpcStatus(CheckBearerToken(context.client_metadata(), edge.auth_token));
}

grpc::Status CheckMemberCall(const EdgeOptions& edge, const grpc::ServerContext& context) {
  if (!edge.tls) return grpc::Status::OK;
  return ToGrpcStatus(CheckMemberPeer(*context.auth_context()));
}

}  // namespace meshserve
