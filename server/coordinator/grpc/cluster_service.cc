#include "server/coordinator/grpc/cluster_service.h"

#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"

namespace meshserve {

void DescribeResultToProto(const DescribeResult& result, DescribeResponse* proto) {
  proto->set_model(result.model);
  proto->set_mesh(result.mesh);
  for (const DescribeValue& v : result.values) {
    auto* p = proto->add_values();
    p->set_name(v.name);
    p->set_kind(v.kind);
    p->set_type_str(v.type_str);
    p->set_visualization(v.visualization);
    p->set_layer_op(v.layer_op);
  }
  for (const DescribeCollective& c : result.collectives) {
    auto* p = proto->add_collectives();
    p->set_layer(c.layer);
    p->set_pattern(c.pattern);
    p->set_value(c.value);
    p->set_bytes(c.bytes);
  }
  proto->set_text(result.text);
}

void ClusterStatusToProto(const std::vector<WorkerView>& workers,
                          const std::vector<ModelStatus>& models,
                          ClusterStatusResponse* proto) {
  const absl::Time now = absl::Now();
  for (const WorkerView& w : workers) {
    auto* p = proto->add_workers();
    p->set_worker_id(w.info.worker_id);
    p->set_address(w.info.address);
    p->set_healthy(w.info.alive && w.status.ok());
    p->set_cores(w.info.cores);
    p->set_last_heartbeat_ms_ago(absl::ToInt64Milliseconds(now - w.info.last_heartbeat));
    if (w.status.ok()) {
      p->set_blas_core(w.status->blas_core);
      p->set_blas_threads(w.status->blas_threads);
    }
    for (const WorkerView::Hosted& h : w.placements) {
      auto* pl = p->add_placements();
      pl->set_model(h.model);
      pl->set_generation(h.generation);
      for (int64_t d : h.devices) pl->add_devices(d);
      for (const std::string& c : h.coords) pl->add_coords(c);
      if (!w.status.ok()) continue;
      for (const auto& m : w.status->models) {
        if (m.model == h.model && m.generation == h.generation) {
          pl->set_param_bytes(m.param_bytes);
        }
      }
    }
  }
  for (const ModelStatus& m : models) {
    auto* p = proto->add_models();
    p->set_name(m.name);
    p->set_state(m.state);
    p->set_mesh(m.mesh);
    p->set_generation(m.generation);
  }
}

grpc::Status ClusterServiceImpl::Describe(grpc::ServerContext* context,
                                          const DescribeRequest* request,
                                          DescribeResponse* response) {
  if (grpc::Status denied = CheckClientCall(edge_, *context); !denied.ok()) return denied;
  InputShapes shapes;
  for (const auto& [name, shape] : request->input_shapes()) {
    shapes[name].assign(shape.dims().begin(), shape.dims().end());
  }
  absl::StatusOr<DescribeResult> result = coordinator_->Describe(request->model(), shapes);
  if (!result.ok()) return ToGrpcStatus(result.status());
  DescribeResultToProto(*result, response);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::Status(grpc::ServerContext* context, const ClusterStatusRequest*,
                                        ClusterStatusResponse* response) {
  if (grpc::Status denied = CheckClientCall(edge_, *context); !denied.ok()) return denied;
  ClusterStatusToProto(coordinator_->Workers(), coordinator_->ModelStatuses(), response);
  return grpc::Status::OK;
}

grpc::Status MembershipServiceImpl::Register(grpc::ServerContext* context,
                                             const RegisterRequest* request,
                                             RegisterResponse* response) {
  if (grpc::Status denied = CheckMemberCall(edge_, *context); !denied.ok()) return denied;
  absl::StatusOr<int64_t> id =
      coordinator_->RegisterWorker(request->address(), request->cores(),
                                   request->memory_bytes(), request->previous_worker_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_worker_id(*id);
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(coordinator_->options().heartbeat_interval));
  return grpc::Status::OK;
}

grpc::Status MembershipServiceImpl::Heartbeat(grpc::ServerContext* context,
                                              const HeartbeatRequest* request,
                                              HeartbeatResponse* response) {
  if (grpc::Status denied = CheckMemberCall(edge_, *context); !denied.ok()) return denied;
  response->set_known(coordinator_->Heartbeat(request->worker_id(), request->draining()));
  return grpc::Status::OK;
}

}  // namespace meshserve
