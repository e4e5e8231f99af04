// libFuzzer target: the programs a worker accepts from a peer (a hostile
// coordinator). The input is a meshserve.Program's wire bytes: parsed,
// converted (ProgramToIr, common/program/program_proto.h, as the worker's
// InstallProgram handler does) and validated by WorkerEngine::InstallProgram
// (server/worker/program_validate.cc); a program
// that installs, and whose boxes are small (BoxesSmall), is then executed for
// one request on a worker that hosts both devices of a small model, with that
// model's inputs and a short deadline (sends to this worker loop back through
// an in-memory transport in small chunks; sends elsewhere fail).
// A program with param_only_steps runs twice: PARAM_CACHE_FILL, then USE.
// Invariants: never crashes, never hangs (libFuzzer's -timeout); an install
// error is kInvalidArgument (kOutOfRange for a negative device); Execute
// returns a Status, whatever the program does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "absl/strings/str_cat.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"
#include "common/program/program_proto.h"
#include "server/worker/worker_engine.h"
#include "server/worker/testing/in_memory_transport.h"

namespace {

constexpr char kModelJson[] = R"({
  "name": "mm", "mesh": {"x": 2}, "dtype": "float32", "seed": 7,
  "inputs": {"x": {"shape": [-1, 8], "sharding": [null, "x"]}},
  "params": {"w": {"shape": [8, 6], "sharding": ["x", null], "init": "normal"},
             "r": {"shape": [6], "sharding": [null], "init": "uniform", "scale": 2.0}},
  "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "w",
              "out_sharding": ["x", null]}],
  "outputs": ["y"]})";

struct Harness {
  meshserve::InMemoryTransport transport{/*chunk_bytes=*/24};
  meshserve::WorkerEngine worker{meshserve::WorkerEngine::Options{}, &transport};

  Harness() {
    transport.Register(0, &worker);
    meshserve::LoadModelRequest load;
    load.set_model("mm");
    load.set_generation(1);
    load.set_model_json(kModelJson);
    auto* axis = load.mutable_mesh()->add_axes();
    axis->set_name("x");
    axis->set_size(2);
    for (int d = 0; d < 2; ++d) {
      load.add_devices(d);
      load.add_device_workers(0);
    }
    // The harness's own model.
    if (!worker.LoadModel(meshserve::LoadModelToIr(load)).ok()) __builtin_trap();
  }
};

// x [4, 8] split over its dim 1: device d holds columns [4d, 4d + 4).
void AddInput(int64_t device, meshserve::ExecuteRequest* request) {
  meshserve::TensorSlice* slice = request->add_inputs();
  slice->set_name("x");
  slice->set_device(device);
  slice->mutable_box()->add_begin(0);
  slice->mutable_box()->add_end(4);
  slice->mutable_box()->add_begin(4 * device);
  slice->mutable_box()->add_end(4 * device + 4);
  slice->set_dtype(meshserve::FLOAT32);
  std::string bytes(4 * 4 * sizeof(float), '\0');
  for (size_t i = 0; i < bytes.size(); i += sizeof(float)) {
    const float v = static_cast<float>(i) / 64.0f - 1.0f;
    bytes.replace(i, sizeof(float), reinterpret_cast<const char*>(&v), sizeof(float));
  }
  slice->set_data(std::move(bytes));
}

// Whether every box the program names has at most kMaxBoxElements elements.
// The worker has no cap on the buffers a program creates (an out_box of 10^10
// elements is a 40 GB allocation: a resource limit, not a parser bug, and
// left to the worker's memory limits); programs beyond it are validated but
// not executed, so the fuzzer explores the rest instead of allocating.
constexpr int64_t kMaxBoxElements = int64_t{1} << 20;

bool BoxSmall(const meshserve::BoxProto& box) {
  int64_t n = 1;
  for (int i = 0; i < box.begin_size() && i < box.end_size(); ++i) {
    const int64_t size = box.end(i) - box.begin(i);
    if (size > kMaxBoxElements) return false;
    n *= size > 0 ? size : 1;
    if (n > kMaxBoxElements) return false;
  }
  return true;
}

bool BoxesSmall(const meshserve::Program& program) {
  for (const meshserve::Step& step : program.steps()) {
    switch (step.kind_case()) {
      case meshserve::Step::kCompute:
        if (!BoxSmall(step.compute().out_box())) return false;
        break;
      case meshserve::Step::kRecv:
        if (!BoxSmall(step.recv().box()) || !BoxSmall(step.recv().buffer_box())) return false;
        break;
      case meshserve::Step::kCopy:
        if (!BoxSmall(step.copy().box()) || !BoxSmall(step.copy().dst_box())) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

}  // namespace

// Malformed strings (invalid UTF-8) are logged by protobuf on every parse: quiet.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* harness = new Harness();
  static int64_t num_requests = 0;
  meshserve::Program program;
  if (!program.ParseFromArray(data, static_cast<int>(size))) return 0;
  program.set_program_id("fuzz");  // one installed program, replaced each run
  absl::StatusOr<meshserve::ProgramIr> ir = meshserve::ProgramToIr(program);
  absl::Status installed =
      ir.ok() ? harness->worker.InstallProgram(*std::move(ir)) : ir.status();
  if (!installed.ok()) {
    if (installed.code() != absl::StatusCode::kInvalidArgument &&
        installed.code() != absl::StatusCode::kOutOfRange) {  // a negative device
      __builtin_trap();
    }
    return 0;
  }
  if (!BoxesSmall(program)) return 0;
  // A program with param-only marks the worker accepted runs keeping them,
  // then skipping them (reading what was kept, or failing if nothing was).
  const bool marked = program.param_only_steps_size() > 0;
  for (meshserve::ParamCache mode : {meshserve::PARAM_CACHE_FILL, meshserve::PARAM_CACHE_USE}) {
    meshserve::ExecuteRequest request;
    request.set_program_id("fuzz");
    request.set_request_id(absl::StrCat("r", num_requests++));
    request.set_deadline_ms(20);
    request.set_param_cache(marked ? mode : meshserve::PARAM_CACHE_OFF);
    AddInput(0, &request);
    AddInput(1, &request);
    std::vector<meshserve::SliceIr> inputs;
    for (meshserve::TensorSlice& slice : *request.mutable_inputs()) {
      inputs.push_back(meshserve::SliceToIr(&slice));
    }
    // A hang is libFuzzer's -timeout.
    (void)harness->worker.Execute(request.program_id(), request.request_id(), std::move(inputs),
                                  absl::Milliseconds(request.deadline_ms()), 0,
                                  static_cast<meshserve::ParamCacheMode>(request.param_cache()));
    if (!marked) break;
  }
  return 0;
}
