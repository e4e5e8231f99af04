// WorkerServiceImpl::Status (worker_service.h): the engine's status, the
// worker's calibration once measured (server/worker/calibration.h; zeros
// before), and the advertised address.
//
// Thread-safety: as the service (address_ under mu_; the calibration behind
// its own mutex).
#include "common/program/program_proto.h"
#include "server/worker/calibration.h"
#include "server/worker/grpc/worker_service.h"

namespace meshserve {

grpc::ServerUnaryReactor* WorkerServiceImpl::Status(grpc::CallbackServerContext* context,
                                                    const WorkerStatusRequest* request,
                                                    WorkerStatusResponse* response) {
  WorkerStatusIr status = worker_->Status();
  if (std::optional<WorkerCalibration> c = CurrentCalibration()) {
    status.gemm_gflops_one_row = c->gemm_gflops_one_row;
    status.gemm_gflops_small_m = c->gemm_gflops_small_m;
    status.gemm_gflops_large_m = c->gemm_gflops_large_m;
    status.memory_bytes_per_s = c->memory_bytes_per_s;
    status.hop_ms = c->hop_ms;
    status.link_bytes_per_s = c->link_bytes_per_s;
    status.calibration_kernel = c->kernel;
  }
  WorkerStatusToProto(status, response);
  {
    absl::MutexLock lock(&mu_);
    response->set_address(address_);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace meshserve
