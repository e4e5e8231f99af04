#include "server/coordinator/grpc/cluster_service.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/model/typed_model.h"
#include "common/program/ir_conv.h"
#include "common/rpc/grpc_status.h"
#include "common/sharding/shard_layout.h"
#include "server/compiler/decode_model.h"

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

namespace {

// "bytes per token: worker W (devices a,b): N" lines of one cache array.
std::string BytesPerTokenText(const ArrayType& cache, const Placement& placement) {
  std::vector<int64_t> per_token_shape = cache.shape;
  per_token_shape[0] = 1;
  std::string text;
  for (const auto& [worker, devices] : placement.devices_by_worker) {
    int64_t bytes = 0;
    for (int64_t d : devices) {
      bytes += ShardBoxForDevice(per_token_shape, cache.sharding, d).NumElements() *
               DTypeSize(cache.dtype);
    }
    absl::StrAppend(&text, "bytes per token: worker ", worker, " (devices ",
                    absl::StrJoin(devices, ","), "): ", bytes, "\n");
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<DescribeValue>> KvCacheDescribeValues(const ModelFile& model,
                                                                 const Placement& placement) {
  absl::StatusOr<LmShape> lm = InspectLm(model);
  if (!lm.ok()) return std::vector<DescribeValue>{};  // not a model that generates
  MS_ASSIGN_OR_RETURN(ModelFile variant, DecodeVariant(model, 1, 1));
  MS_ASSIGN_OR_RETURN(TypedModel typed,
                      TypeModel(variant, placement.mesh, {{lm->input, {1, 1}}}));
  const int64_t tokens = std::max<int64_t>(lm->context_length, 1);
  std::vector<DescribeValue> values;
  for (const LayerDef& layer : variant.layers) {
    if (layer.kind != ModelOp::kAttention || layer.inputs.size() < 3) continue;
    // Keys and values are [batch, positions, kv_heads, head_dim].
    for (int i : {1, 2}) {
      const ArrayType* kv = typed.Find(layer.inputs[i]);
      if (kv == nullptr || kv->rank() != 4) continue;
      ArrayType cache;
      cache.dtype = kv->dtype;
      cache.shape = {tokens, kv->shape[2], kv->shape[3]};
      MS_ASSIGN_OR_RETURN(
          cache.sharding,
          NamedSharding::Create(typed.mesh,
                                PartitionSpec({{}, kv->spec().entry(2), kv->spec().entry(3)}), 3));
      DescribeValue v;
      v.name = absl::StrCat(layer.name, i == 1 ? ".k_cache" : ".v_cache");
      v.kind = "kv_cache";
      v.type_str = cache.ToString();
      v.visualization = BytesPerTokenText(cache, placement);
      v.layer_op = "attention";
      values.push_back(std::move(v));
    }
  }
  return values;
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
    p->set_warming(w.info.alive && w.info.warming);
    p->set_last_heartbeat_ms_ago(absl::ToInt64Milliseconds(now - w.info.last_heartbeat));
    if (w.status.ok()) {
      p->set_blas_core(w.status->blas_core);
      p->set_blas_threads(w.status->blas_threads);
      p->set_gemm_gflops_one_row(w.status->gemm_gflops_one_row);
      p->set_gemm_gflops_small_m(w.status->gemm_gflops_small_m);
      p->set_gemm_gflops_large_m(w.status->gemm_gflops_large_m);
      p->set_memory_bytes_per_s(w.status->memory_bytes_per_s);
      p->set_hop_ms(w.status->hop_ms);
      p->set_link_bytes_per_s(w.status->link_bytes_per_s);
      p->set_calibration_kernel(w.status->calibration_kernel);
    }
    for (const WorkerView::Hosted& h : w.placements) {
      auto* pl = p->add_placements();
      pl->set_model(h.model);
      pl->set_generation(h.generation);
      pl->set_version(h.version);
      for (int64_t d : h.devices) pl->add_devices(d);
      for (int64_t d : h.replica_devices) pl->add_replica_devices(d);
      for (const std::string& c : h.coords) pl->add_coords(c);
      if (!w.status.ok()) continue;
      for (const auto& m : w.status->models) {
        if (m.model == h.model && m.generation == h.generation && m.version == h.version) {
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
    p->set_version(m.version);
    p->set_replicas(m.replicas);
    for (const ScaleStep& step : m.scale_steps) {
      auto* s = p->add_scale_steps();
      s->set_generation(step.generation);
      s->set_workers(step.workers);
      s->set_seconds(step.seconds);
      s->set_bytes_moved(step.stats.bytes_moved);
      s->set_lower_bound_bytes(step.stats.lower_bound_bytes);
      s->set_bytes_local(step.stats.bytes_local);
      s->set_bytes_initialized(step.stats.bytes_initialized);
    }
  }
}

namespace {

// \error kInvalidArgument naming a dtype number tensor.proto lacks.
absl::StatusOr<PushChunk> PushChunkFromProto(PushParamsChunk* message) {
  MS_ASSIGN_OR_RETURN(std::optional<DType> dtype, OptionalDTypeFromProto(message->dtype()),
                      "param '", message->param(), "'");
  return PushChunk{message->model(),
                   message->param(),
                   {message->offset().begin(), message->offset().end()},
                   {message->shape().begin(), message->shape().end()},
                   dtype,
                   message->byte_offset(),
                   std::move(*message->mutable_data())};
}


}  // namespace

void PushResultToProto(const PushResult& result, PushParamsResponse* response) {
  response->set_version(result.version);
  response->set_bytes_received(result.bytes_received);
  for (const std::string& p : result.params) response->add_params(p);
  response->set_bytes_to_workers(result.bytes_to_workers);
  response->set_bytes_filled(result.bytes_filled);
  response->set_seconds(result.seconds);
}

grpc::Status ClusterServiceImpl::Describe(grpc::ServerContext* context,
                                          const DescribeRequest* request,
                                          DescribeResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  InputShapes shapes;
  for (const auto& [name, shape] : request->input_shapes()) {
    shapes[name].assign(shape.dims().begin(), shape.dims().end());
  }
  absl::StatusOr<DescribeResult> result = coordinator_->Describe(request->model(), shapes);
  if (!result.ok()) return ToGrpcStatus(result.status());
  // The KV cache, on the placement serving the model (none before it is placed).
  absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(request->model());
  if (status.ok() && status->model != nullptr && status->placement != nullptr) {
    absl::StatusOr<std::vector<DescribeValue>> kv =
        KvCacheDescribeValues(*status->model, *status->placement);
    if (!kv.ok()) return ToGrpcStatus(kv.status());
    for (DescribeValue& v : *kv) result->values.push_back(std::move(v));
  }
  DescribeResultToProto(*result, response);
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::Status(grpc::ServerContext* context, const ClusterStatusRequest*,
                                        ClusterStatusResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  ClusterStatusToProto(coordinator_->Workers(), coordinator_->ModelStatuses(), response);
  return grpc::Status::OK;
}

absl::Time PushDeadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline) - absl::Seconds(1);
}

// Reads the stream into the core's ParamPush (param_push.h); the push aborts
// when this handler returns without committing.
grpc::Status ClusterServiceImpl::PushParams(grpc::ServerContext* context,
                                            grpc::ServerReader<PushParamsChunk>* reader,
                                            PushParamsResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  PushParamsChunk message;
  if (!reader->Read(&message)) {
    return ToGrpcStatus(absl::InvalidArgumentError("PushParams: empty stream"));
  }
  absl::StatusOr<std::unique_ptr<ParamPush>> push = coordinator_->BeginPush(message.model(), PushDeadline(*context));
  if (!push.ok()) return ToGrpcStatus(push.status());
  do {
    absl::StatusOr<PushChunk> chunk = PushChunkFromProto(&message);
    absl::Status s = chunk.ok() ? (*push)->Add(*std::move(chunk)) : chunk.status();
    if (!s.ok()) return ToGrpcStatus(s);
  } while (reader->Read(&message));
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "push cancelled");
  absl::StatusOr<PushResult> result = (*push)->Finish();
  if (!result.ok()) return ToGrpcStatus(result.status());
  PushResultToProto(*result, response);
  return grpc::Status::OK;
}

// The plan, then the commit (cluster_service.proto); the push aborts when this
// handler returns without committing.
grpc::Status ClusterServiceImpl::PushDirect(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<PushDirectReply, PushDirectRequest>* stream) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  PushDirectRequest request;
  if (!stream->Read(&request)) {
    return ToGrpcStatus(absl::InvalidArgumentError("PushDirect: empty stream"));
  }
  if (request.commit()) {
    return ToGrpcStatus(absl::InvalidArgumentError("PushDirect: commit before the boxes"));
  }
  absl::StatusOr<std::unique_ptr<ParamPush>> push = coordinator_->BeginPush(request.model(), PushDeadline(*context));
  if (!push.ok()) return ToGrpcStatus(push.status());
  std::vector<PushChunk> boxes;
  boxes.reserve(static_cast<size_t>(request.boxes_size()));
  for (PushParamsChunk& box : *request.mutable_boxes()) {
    if (box.model().empty()) box.set_model(request.model());
    absl::StatusOr<PushChunk> chunk = PushChunkFromProto(&box);
    if (!chunk.ok()) return ToGrpcStatus(chunk.status());
    boxes.push_back(*std::move(chunk));
  }
  absl::StatusOr<PushPlan> plan = (*push)->Plan(boxes);
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  PushDirectReply reply;
  reply.set_generation(plan->generation);
  reply.set_version(plan->version);
  for (const PushPlan::Route& r : plan->routes) {
    PushRoute* route = reply.add_routes();
    route->set_box(r.box);
    route->set_worker_id(r.worker);
    route->set_address(r.address);
    for (const Interval& d : r.piece.dims()) {
      route->add_offset(d.begin);
      route->add_shape(d.size());
    }
  }
  if (!stream->Write(reply)) return grpc::Status(grpc::StatusCode::CANCELLED, "push cancelled");
  if (!stream->Read(&request) || context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "push cancelled before its commit; nothing changed");
  }
  if (!request.commit()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "PushDirect: the message after the boxes must be the commit; nothing changed"));
  }
  absl::StatusOr<PushResult> result = (*push)->Finish();
  if (!result.ok()) return ToGrpcStatus(result.status());
  reply.Clear();
  PushResultToProto(*result, reply.mutable_result());
  stream->Write(reply);
  return grpc::Status::OK;
}

grpc::Status MembershipServiceImpl::Register(grpc::ServerContext* context,
                                             const RegisterRequest* request,
                                             RegisterResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitMemberCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  int64_t warm_bytes = 0;
  absl::StatusOr<int64_t> id = coordinator_->RegisterWorker(
      request->address(), request->cores(), request->memory_bytes(),
      request->previous_worker_id(), request->warms_up(), &warm_bytes);
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_worker_id(*id);
  response->set_warm_bytes(warm_bytes);
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(coordinator_->options().heartbeat_interval));
  return grpc::Status::OK;
}

grpc::Status MembershipServiceImpl::Heartbeat(grpc::ServerContext* context,
                                              const HeartbeatRequest* request,
                                              HeartbeatResponse* response) {
  absl::StatusOr<CallGate::Pass> pass = AdmitMemberCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  response->set_known(
      coordinator_->Heartbeat(request->worker_id(), request->draining(), request->warm()));
  return grpc::Status::OK;
}

}  // namespace meshserve
