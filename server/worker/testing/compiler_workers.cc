// RunOnInProcessWorkers (compiler_workers.h): the IR goes to the workers'
// messages through common/program/program_proto.h.
#include "server/worker/testing/compiler_workers.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/program/program_proto.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"
#include "server/worker/testing/in_process_workers.h"

namespace meshserve {

absl::StatusOr<std::vector<SliceIr>> RunOnInProcessWorkers(
    int num_workers, const LoadModelIr& load, const std::map<int64_t, ProgramIr>& programs,
    const std::vector<SliceIr>& inputs) {
  InProcessWorkers cluster(num_workers);
  LoadModelRequest request;
  LoadModelFromIr(load, &request);
  absl::StatusOr<int64_t> loaded = cluster.LoadModel(request);
  if (!loaded.ok()) return loaded.status();
  std::vector<Program> protos;
  std::string program_id;
  for (const auto& [w, p] : programs) {
    ProgramFromIr(p, &protos.emplace_back());
    program_id = p.program_id;
  }
  absl::Status installed = cluster.InstallPrograms(protos);
  if (!installed.ok()) return installed;
  std::map<int64_t, ExecuteRequest> requests;
  for (const auto& [w, p] : programs) {
    requests[w].set_program_id(program_id);
    requests[w].set_request_id("r1");
  }
  for (const SliceIr& s : inputs) {
    int64_t w = load.device_workers.at(s.device);
    SliceFromIr(s, requests[w].add_inputs());
  }
  auto responses = cluster.Execute(std::move(requests));
  if (!responses.ok()) return responses.status();
  std::vector<SliceIr> out;
  for (auto& [w, response] : *responses) {
    for (TensorSlice& t : *response.mutable_outputs()) out.push_back(SliceToIr(&t));
  }
  return out;
}

}  // namespace meshserve
