// ClusterService's parameter handlers (proto/cluster_service.proto): the
// push sessions (BeginPush, JoinPush, PlanPut, StageThrough, CommitPush,
// AbortPush: a push many processes join by its push_id, over the
// Coordinator's PushSessions, server/coordinator/params/push_sessions.h) and
// the pulls (PullParams: whole params through the coordinator, or a box of one
// at a version; PlanPull / EndPull: box pulls read straight from the holders;
// ParamPulls, params/param_pull.h). Thin: parse, call the core, convert the
// status once.
//
// Thread-safety: thread-safe (the Coordinator is).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/program/ir_conv.h"
#include "common/rpc/grpc_status.h"
#include "server/coordinator/grpc/cluster_service.h"
#include "server/coordinator/params/param_pull.h"

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
                                               PushDeadline(*context));
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

// ---- pulls ----

namespace {

// A box pull: offset, shape or version set, or one name (which may be a
// checkpoint tensor's). Several names with none of those: whole params.
bool IsBoxPull(const PullParamsRequest& r) {
  return r.offset_size() > 0 || r.shape_size() > 0 || r.version() != 0 || r.params_size() == 1;
}

void SetBox(const Box& box, BoxProto* proto) {
  for (const Interval& i : box.dims()) {
    proto->add_begin(i.begin);
    proto->add_end(i.end);
  }
}

// One PullParamsChunk on the stream (shape and dtype set by the first).
absl::Status Send(grpc::ServerWriter<PullParamsChunk>* writer, const std::string& param,
                  const std::vector<int64_t>& shape, std::optional<DType> dtype,
                  int64_t total_bytes,
                  int64_t byte_offset, std::string data, int64_t version) {
  PullParamsChunk message;
  message.set_param(param);
  for (int64_t d : shape) message.add_shape(d);
  message.set_dtype(static_cast<DTypeProto>(OptionalDTypeToProto(dtype)));
  message.set_total_bytes(total_bytes);
  message.set_byte_offset(byte_offset);
  message.set_data(std::move(data));
  message.set_version(version);
  if (!writer->Write(message)) return absl::CancelledError("PullParams: client gone");
  return absl::OkStatus();
}

}  // namespace

grpc::Status ClusterServiceImpl::PullParams(grpc::ServerContext* context,
                                            const PullParamsRequest* request,
                                            grpc::ServerWriter<PullParamsChunk>* writer) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  const std::string& model = request->model();
  ParamPulls& pulls = coordinator_->param_pulls();
  auto send = [writer](BoxPullChunk c) {
    return Send(writer, c.name, c.shape, c.first ? std::optional<DType>(c.dtype) : std::nullopt,
                c.total_bytes, c.byte_offset, std::move(c.data), c.version);
  };
  if (IsBoxPull(*request)) {
    if (request->params_size() != 1) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "PullParams of model '", model, "' with offset, shape or version names ",
          request->params_size(), " params; a box pull names exactly one")));
    }
    return ToGrpcStatus(pulls.PullBox({model, request->params(0),
                                       {request->offset().begin(), request->offset().end()},
                                       {request->shape().begin(), request->shape().end()},
                                       request->version()},
                                      send));
  }
  std::vector<std::string> names(request->params().begin(), request->params().end());
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(model);
  const bool servable = status.ok() && status->ready && status->model != nullptr;
  bool known = servable;
  for (const std::string& name : names) known = known && status->model->FindParam(name);
  if (!known) {  // the whole-param path's own errors (unknown model or param, not placed)
    return ToGrpcStatus(coordinator_->PullParams(model, names, [&](PullChunk c) {
      return Send(writer, c.param, c.shape, c.dtype, c.total_bytes, c.byte_offset,
                  std::move(c.data), c.version);
    }));
  }
  if (names.empty()) {
    for (const ParamDef& p : status->model->params) names.push_back(p.name);
    if (names.empty()) return grpc::Status::OK;
  }
  // Every param at one version, pinned by a lease while they stream in slabs.
  absl::StatusOr<PullPlan> lease = pulls.PlanPull({model, names.front(), {}, {}, 0});
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  absl::Status s;
  for (size_t i = 0; i < names.size() && s.ok(); ++i) {
    s = pulls.PullBox({model, names[i], {}, {}, lease->version}, send);
  }
  pulls.EndPull(model, lease->lease_id).IgnoreError();
  return ToGrpcStatus(s);
}

grpc::Status ClusterServiceImpl::PlanPull(grpc::ServerContext* context,
                                          const PlanPullRequest* request, PlanPullReply* reply) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  BoxPullRequest box{request->model(), request->name(),
                     {request->offset().begin(), request->offset().end()},
                     {request->shape().begin(), request->shape().end()}, request->version()};
  absl::StatusOr<PullPlan> plan = coordinator_->param_pulls().PlanPull(box);
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  reply->set_lease_id(plan->lease_id);
  reply->set_lease_s(plan->lease_s);
  reply->set_generation(plan->generation);
  reply->set_version(plan->version);
  reply->set_dtype(static_cast<DTypeProto>(DTypeToProto(plan->dtype)));
  for (int64_t d : plan->shape) reply->add_shape(d);
  for (const PullPlanPiece& piece : plan->pieces) {
    PullPiece* out = reply->add_pieces();
    out->set_param(piece.param);
    for (int64_t d : piece.dst_offset) out->add_dst_offset(d);
    SetBox(piece.box, out->mutable_box());
    out->set_worker_id(piece.worker_id);
    out->set_address(piece.address);
  }
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::EndPull(grpc::ServerContext* context,
                                         const EndPullRequest* request, EndPullReply*) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  return ToGrpcStatus(coordinator_->param_pulls().EndPull(request->model(), request->lease_id()));
}

}  // namespace meshserve
