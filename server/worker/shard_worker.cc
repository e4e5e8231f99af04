#include "common/program/program_proto.h"
#include "server/worker/shard_worker.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"

namespace meshserve {

absl::Status ShardWorker::LoadModel(const LoadModelRequest& request,
                                    LoadModelResponse* response) {
  MS_ASSIGN_OR_RETURN(LoadModelResultIr result, engine_.LoadModel(LoadModelToIr(request)));
  response->set_param_bytes(result.param_bytes);
  response->set_bytes_fetched(result.bytes_fetched);
  response->set_bytes_local(result.bytes_local);
  return absl::OkStatus();
}

absl::Status ShardWorker::UnloadModel(const UnloadModelRequest& request) {
  return engine_.UnloadModel(request.model(), request.generation(), request.version());
}

absl::Status ShardWorker::InstallProgram(const Program& program) {
  MS_ASSIGN_OR_RETURN(ProgramIr ir, ProgramToIr(program));
  return engine_.InstallProgram(std::move(ir));
}

absl::Status ShardWorker::Execute(ExecuteRequest* request, ExecuteResponse* response) {
  absl::Notification finished;
  absl::Status result;
  ExecuteAsync(request, response, [&](absl::Status status) {
    result = std::move(status);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

void ShardWorker::ExecuteAsync(ExecuteRequest* request, ExecuteResponse* response,
                               std::function<void(absl::Status)> done) {
  std::vector<SliceIr> inputs;
  inputs.reserve(request->inputs_size());
  for (TensorSlice& slice : *request->mutable_inputs()) inputs.push_back(SliceToIr(&slice));
  engine_.ExecuteAsync(
      request->program_id(), request->request_id(), std::move(inputs),
      absl::Milliseconds(request->deadline_ms()), request->param_version(),
      static_cast<ParamCacheMode>(request->param_cache()),
      [response, done = std::move(done)](absl::StatusOr<std::vector<SliceIr>> outputs) {
        if (!outputs.ok()) return done(outputs.status());
        for (SliceIr& out : *outputs) SliceFromIr(&out, response->add_outputs());
        done(absl::OkStatus());
      });
}

absl::Status ShardWorker::PushChunk(const DataChunk& chunk) {
  return engine_.DeliverChunk(chunk.request_id(), chunk.tag(), chunk.total_bytes(),
                              chunk.offset(), chunk.data(), chunk.src_worker(),
                              static_cast<int>(chunk.dtype()));
}

void ShardWorker::Cancel(const CancelRequest& request) {
  engine_.Cancel(request.request_id(), request.reason());
}

absl::StatusOr<ParamBytes> ShardWorker::ReadParam(const ReadParamRequest& request) const {
  return engine_.ReadParam(ReadParamToIr(request));
}

absl::StatusOr<int64_t> ShardWorker::StageChunk(StageParamChunk* chunk, int64_t stream_epoch,
                                                std::vector<absl::string_view> data) {
  StageChunkIr ir = StageChunkToIr(chunk);
  ir.data_views = std::move(data);
  return engine_.StageParams(ir, stream_epoch);
}

absl::Status ShardWorker::CommitParams(const CommitParamsRequest& request,
                                       CommitParamsResponse* response) {
  MS_ASSIGN_OR_RETURN(CommitResultIr result, engine_.CommitParams(CommitParamsToIr(request)));
  response->set_param_bytes(result.param_bytes);
  response->set_bytes_fetched(result.bytes_fetched);
  return absl::OkStatus();
}

absl::Status ShardWorker::AbortParams(const AbortParamsRequest& request) {
  return engine_.AbortParams(request.model(), request.generation(), request.version());
}

void ShardWorker::GetStatus(WorkerStatusResponse* response) const {
  WorkerStatusToProto(engine_.Status(), response);
}

}  // namespace meshserve
