// RunOnInProcessWorkers (compiler_workers.h). Includes only the IR headers,
// the generated protos and the worker's in-process cluster.
#include "server/coordinator/compiler_workers.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"
#include "server/worker/in_process_workers.h"

namespace meshserve {
namespace {

template <typename ProtoBox>
void SetBox(const IrBox& box, ProtoBox* out) {
  for (int64_t b : box.begin) out->add_begin(b);
  for (int64_t e : box.end) out->add_end(e);
}

}  // namespace

absl::StatusOr<std::vector<IrSlice>> RunOnInProcessWorkers(
    int num_workers, const IrModelLoad& load, const std::map<int64_t, IrProgram>& programs,
    const std::vector<IrSlice>& inputs) {
  InProcessWorkers cluster(num_workers);
  LoadModelRequest request;
  request.set_model(load.model);
  request.set_generation(load.generation);
  request.set_model_json(load.model_json);
  for (const auto& [name, size] : load.mesh_axes) {
    auto* axis = request.mutable_mesh()->add_axes();
    axis->set_name(name);
    axis->set_size(size);
  }
  for (int64_t w : load.device_workers) request.add_device_workers(w);
  absl::StatusOr<int64_t> loaded = cluster.LoadModel(request);
  if (!loaded.ok()) return loaded.status();
  std::vector<Program> protos;
  std::string program_id;
  for (const auto& [w, p] : programs) {
    Program proto;
    if (!proto.ParseFromString(SerializeProgram(p))) {
      return absl::InternalError("program does not parse");
    }
    program_id = p.program_id;
    protos.push_back(std::move(proto));
  }
  absl::Status installed = cluster.InstallPrograms(protos);
  if (!installed.ok()) return installed;
  std::map<int64_t, ExecuteRequest> requests;
  for (const auto& [w, p] : programs) {
    requests[w].set_program_id(program_id);
    requests[w].set_request_id("r1");
  }
  for (const IrSlice& s : inputs) {
    int64_t w = load.device_workers.at(s.device);
    TensorSlice* slice = requests[w].add_inputs();
    slice->set_name(s.name);
    slice->set_device(s.device);
    SetBox(s.box, slice->mutable_box());
    slice->set_dtype(static_cast<decltype(slice->dtype())>(s.dtype));
    slice->set_data(s.data);
  }
  auto responses = cluster.Execute(std::move(requests));
  if (!responses.ok()) return responses.status();
  std::vector<IrSlice> out;
  for (const auto& [w, response] : *responses) {
    for (const TensorSlice& t : response.outputs()) {
      IrSlice s;
      s.name = t.name();
      s.device = t.device();
      s.box.begin.assign(t.box().begin().begin(), t.box().begin().end());
      s.box.end.assign(t.box().end().begin(), t.box().end().end());
      s.dtype = static_cast<int>(t.dtype());
      s.data = t.data();
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace meshserve
