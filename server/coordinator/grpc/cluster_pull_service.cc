// ClusterService's pull handlers: PullParams (whole params through the
// coordinator, or a box of one at a version) and PlanPull / EndPull (box
// pulls read straight from the holders; proto/cluster_service.proto).
// Thin: parse, call the core, convert the status once.
//
// Thread-safety: thread-safe (the Coordinator is).
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/rpc/grpc_status.h"
#include "server/coordinator/grpc/cluster_service.h"

namespace meshserve {

grpc::Status ClusterServiceImpl::PullParams(grpc::ServerContext* context,
                                            const PullParamsRequest* request,
                                            grpc::ServerWriter<PullParamsChunk>* writer) {
  absl::StatusOr<CallGate::Pass> pass = AdmitClientCall(edge_, gate_, *context);
  if (!pass.ok()) return ToGrpcStatus(pass.status());
  std::vector<std::string> params(request->params().begin(), request->params().end());
  absl::Status s = coordinator_->PullParams(
      request->model(), params, [&](PullChunk chunk) -> absl::Status {
        PullParamsChunk message;
        message.set_param(chunk.param);
        for (int64_t d : chunk.shape) message.add_shape(d);
        message.set_dtype(static_cast<DTypeProto>(chunk.dtype));
        message.set_total_bytes(chunk.total_bytes);
        message.set_byte_offset(chunk.byte_offset);
        message.set_data(std::move(chunk.data));
        message.set_version(chunk.version);
        if (!writer->Write(message)) return absl::CancelledError("PullParams: client gone");
        return absl::OkStatus();
      });
  return ToGrpcStatus(s);
}

grpc::Status ClusterServiceImpl::PlanPull(grpc::ServerContext*, const PlanPullRequest*,
                                          PlanPullReply*) {
  return ToGrpcStatus(absl::UnimplementedError("PlanPull: not implemented yet"));
}

grpc::Status ClusterServiceImpl::EndPull(grpc::ServerContext*, const EndPullRequest*,
                                         EndPullReply*) {
  return ToGrpcStatus(absl::UnimplementedError("EndPull: not implemented yet"));
}

}  // namespace meshserve
