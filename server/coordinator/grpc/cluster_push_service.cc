// ClusterService's push-session handlers (BeginPush, JoinPush, PlanPut,
// StageThrough, CommitPush, AbortPush; proto/cluster_service.proto): a push
// many processes join by its push_id. Thin: parse, call the core, convert the
// status once.
//
// Thread-safety: thread-safe (the Coordinator is).
#include "absl/status/status.h"
#include "common/rpc/grpc_status.h"
#include "server/coordinator/grpc/cluster_service.h"

namespace meshserve {

grpc::Status ClusterServiceImpl::BeginPush(grpc::ServerContext*, const BeginPushRequest*, PushSession*) {
  return ToGrpcStatus(absl::UnimplementedError("BeginPush: not implemented yet"));
}

grpc::Status ClusterServiceImpl::JoinPush(grpc::ServerContext*, const JoinPushRequest*, PushSession*) {
  return ToGrpcStatus(absl::UnimplementedError("JoinPush: not implemented yet"));
}

grpc::Status ClusterServiceImpl::PlanPut(grpc::ServerContext*, const PlanPutRequest*, PlanPutReply*) {
  return ToGrpcStatus(absl::UnimplementedError("PlanPut: not implemented yet"));
}

grpc::Status ClusterServiceImpl::StageThrough(grpc::ServerContext*, grpc::ServerReader<StageThroughChunk>*, StageThroughReply*) {
  return ToGrpcStatus(absl::UnimplementedError("StageThrough: not implemented yet"));
}

grpc::Status ClusterServiceImpl::CommitPush(grpc::ServerContext*, const CommitPushRequest*, PushParamsResponse*) {
  return ToGrpcStatus(absl::UnimplementedError("CommitPush: not implemented yet"));
}

grpc::Status ClusterServiceImpl::AbortPush(grpc::ServerContext*, const AbortPushRequest*, AbortPushReply*) {
  return ToGrpcStatus(absl::UnimplementedError("AbortPush: not implemented yet"));
}

}  // namespace meshserve
