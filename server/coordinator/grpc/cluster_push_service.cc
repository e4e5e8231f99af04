// ClusterService's push-session handlers (BeginPush, JoinPush, PlanPut,
// StageThrough, CommitPush, AbortPush; proto/cluster_service.proto): a push
// many processes join by its push_id, over the Coordinator's PushSessions
// (server/coordinator/params/push_sessions.h). Thin: parse, call the core,
// convert the status once.
//
// Thread-safety: thread-safe (the Coordinator is).
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/program/ir_conv.h"
#include "common/rpc/grpc_status.h"
#include "server/coordinator/grpc/cluster_service.h"

namespace meshserve {
namespace {

void SessionToProto(const PushSessionInfo& info, PushSession* proto) {
  proto->set_push_id(info.push_id);
  proto->set_model(info.model);
  proto->set_generation(info.generation);
  proto->set_version(info.version);
  proto->set_ttl_s(info.ttl_s);
}

void PieceToProto(const PutRoute& route, PutPiece* proto) {
  proto->set_param(route.param);
  proto->set_dtype(static_cast<DTypeProto>(DTypeToProto(route.dtype)));
  for (int64_t d : route.src_offset) proto->add_src_offset(d);
  for (const Interval& d : route.box.dims()) {
    proto->mutable_box()->add_begin(d.begin);
    proto->mutable_box()->add_end(d.end);
  }
  proto->set_worker_id(route.worker);
  proto->set_address(route.address);
}

// The commit's wait for --max_live_versions ends a second before the call's
// deadline, so that the server's message reaches the client first.
absl::Time CommitDeadline(const grpc::ServerContext& context) {
  if (context.deadline() == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(context.deadline()) - absl::Seconds(1);
}

}  // namespace

grpc::Status ClusterServiceImpl::BeginPush(grpc::ServerContext* context,
                                           const BeginPushRequest* request,
                                           PushSession* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<PushSessionInfo> info = coordinator_->push_sessions().BeginPush(request->model());
  if (!info.ok()) return ToGrpcStatus(info.status());
  SessionToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::JoinPush(grpc::ServerContext* context,
                                          const JoinPushRequest* request,
                                          PushSession* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<PushSessionInfo> info =
      coordinator_->push_sessions().JoinPush(request->model(), request->push_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  SessionToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::PlanPut(grpc::ServerContext* context,
                                         const PlanPutRequest* request, PlanPutReply* reply) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<PutPlan> plan = coordinator_->push_sessions().PlanPut(
      request->model(), request->push_id(), request->name(),
      {request->offset().begin(), request->offset().end()},
      {request->shape().begin(), request->shape().end()});
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  SessionToProto(plan->session, reply->mutable_session());
  for (const PutRoute& route : plan->pieces) PieceToProto(route, reply->add_pieces());
  reply->set_note(plan->note);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::StageThrough(grpc::ServerContext* context,
                                              grpc::ServerReader<StageThroughChunk>* reader,
                                              StageThroughReply* reply) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  StageThroughChunk message;
  absl::StatusOr<int64_t> bytes =
      coordinator_->push_sessions().StageThrough([&](RelayChunk* chunk) {
        if (!reader->Read(&message)) return false;
        StageParamChunkRelay* c = message.mutable_chunk();
        chunk->push_id = std::move(*message.mutable_push_id());
        chunk->worker = message.worker_id();
        chunk->param = std::move(*c->mutable_param());
        chunk->box.begin.assign(c->box().begin().begin(), c->box().begin().end());
        chunk->box.end.assign(c->box().end().begin(), c->box().end().end());
        chunk->total_bytes = c->total_bytes();
        chunk->offset = c->offset();
        chunk->data = std::move(*c->mutable_data());
        return true;
      });
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  reply->set_bytes(*bytes);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::CommitPush(grpc::ServerContext* context,
                                            const CommitPushRequest* request,
                                            PushParamsResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  absl::StatusOr<PushResult> result =
      coordinator_->push_sessions().CommitPush(request->model(), request->push_id(),
                                               CommitDeadline(*context));
  if (!result.ok()) return ToGrpcStatus(result.status());
  PushResultToProto(*result, response);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::AbortPush(grpc::ServerContext* context,
                                           const AbortPushRequest* request, AbortPushReply*) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  return ToGrpcStatus(
      coordinator_->push_sessions().AbortPush(request->model(), request->push_id()));
}

}  // namespace meshserve
