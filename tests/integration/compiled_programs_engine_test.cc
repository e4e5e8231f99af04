// The model compiler's programs (server/coordinator/compiler.h) run on real
// WorkerEngines (one per worker, InMemoryTransport, params read from a
// safetensors checkpoint) and agree with the compiler's reference interpreter
// on the same inputs and params: the IR contract between the two teams, on
// 1, 2, 4 and 8 workers. Both sides use the one program IR
// (common/program/program_ir.h).
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/safetensors.h"
#include "server/compiler/compiler.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "server/worker/testing/in_memory_transport.h"
#include "server/worker/worker_engine.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT

void CheckOnWorkers(const std::string& json_without_checkpoint,
                    const std::map<std::string, std::vector<int64_t>>& shapes,
                    int num_workers) {
  SCOPED_TRACE(absl::StrCat(num_workers, " workers"));
  ASSERT_OK_AND_ASSIGN(ModelFile m0, ParseModelFile(json_without_checkpoint, ""));
  const std::map<std::string, Tensor> params = RandomParams(m0);
  const std::string ckpt =
      absl::StrCat(::testing::TempDir(), "/compiled_programs_", m0.name, ".safetensors");
  ASSERT_OK(WriteSafetensors(ckpt, params));
  const std::string json =
      absl::StrCat("{\"checkpoint\": \"", ckpt, "\", ", json_without_checkpoint.substr(1));
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, shapes, {}));
  const std::vector<int64_t> device_workers = BlockWorkers(mesh.num_devices(), num_workers);
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, device_workers, {"prog", 3}));

  InMemoryTransport transport;
  std::vector<std::unique_ptr<WorkerEngine>> engines;
  for (int w = 0; w < num_workers; ++w) {
    WorkerEngine::Options options;
    options.worker_id = w;
    options.default_deadline = absl::Seconds(20);
    engines.push_back(std::make_unique<WorkerEngine>(options, &transport));
    transport.Register(w, engines.back().get());
    LoadModelIr load;
    load.model = m.name;
    load.generation = 3;
    load.model_json = json;
    for (const MeshAxis& a : mesh.axes()) load.mesh.push_back(MeshAxisIr{a.name, a.size, ""});
    for (int64_t d = 0; d < mesh.num_devices(); ++d) {
      if (device_workers[d] == w) load.devices.push_back(d);
    }
    load.device_workers = device_workers;
    ASSERT_OK(engines[w]->LoadModel(load).status());
    ASSERT_OK(engines[w]->InstallProgram(cm.programs.at(w)));
  }

  std::map<std::string, Tensor> inputs;
  uint64_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    if (m.FindInput(name)->dtype == DType::kInt32) {  // embedding ids
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<int32_t> ids(n);
      for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % 32);
      ASSERT_OK_AND_ASSIGN(inputs[name], Tensor::FromInt32(shape, ids));
    } else {
      inputs[name] = RandomTensor(shape, seed++);
    }
  }
  std::vector<std::vector<SliceIr>> slices(num_workers);
  for (const InputSlice& s : cm.input_slices) {
    const Tensor& full = inputs.at(s.input);
    ASSERT_OK_AND_ASSIGN(BoxTensor whole, BoxTensor::Wrap(Box::FromShape(full.shape()), full));
    SliceIr slice;
    slice.name = s.input;
    slice.device = s.device;
    slice.box = BoxToIr(s.box);
    slice.dtype = full.dtype();
    ASSERT_OK_AND_ASSIGN(slice.data, ExtractBox(whole, s.box));
    slices[s.worker].push_back(std::move(slice));
  }
  std::vector<absl::StatusOr<std::vector<SliceIr>>> results(num_workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w]() {
      results[w] = engines[w]->Execute("prog", "req", std::move(slices[w]), absl::ZeroDuration());
    });
  }
  for (auto& t : threads) t.join();
  std::map<std::string, BoxTensor> outputs;
  for (int w = 0; w < num_workers; ++w) {
    ASSERT_OK(results[w].status());
    for (const SliceIr& s : *results[w]) {
      ASSERT_TRUE(s.dtype.has_value()) << s.name;
      const DType dtype = *s.dtype;
      if (!outputs.count(s.name)) {
        ASSERT_OK_AND_ASSIGN(outputs[s.name],
                             BoxTensor::Create(dtype, Box::FromShape(tm.TypeOf(s.name).shape)));
      }
      ASSERT_OK_AND_ASSIGN(Box box, BoxFromIr(s.box));
      ASSERT_OK(InsertBox(&outputs[s.name], box, s.data, false));
    }
  }
  ASSERT_OK_AND_ASSIGN(auto reference, RunCompiledPlan(cm, tm, inputs, params, nullptr));
  for (const std::string& name : m.outputs) {
    ASSERT_TRUE(outputs.count(name)) << name;
    EXPECT_LT(MaxAbsDiff(outputs[name].tensor, reference.at(name)), 1e-4) << name;
  }
  std::remove(ckpt.c_str());
}

TEST(CompiledProgramsTest, SeedLinearRunsOnWorkers) {
  for (int workers : {1, 2, 4, 8}) CheckOnWorkers(SeedLinear(), {{"x", {16, 32}}}, workers);
}

TEST(CompiledProgramsTest, SwigluRunsOnWorkers) {
  for (int workers : {1, 2, 4, 8}) CheckOnWorkers(Swiglu(16, 32), {{"x", {4, 3, 16}}}, workers);
}

TEST(CompiledProgramsTest, TransformerBlockRunsOnWorkers) {
  for (int workers : {1, 2, 4, 8}) {
    CheckOnWorkers(TransformerBlock(), {{"x", {2, 4, 16}}}, workers);
  }
}

TEST(CompiledProgramsTest, EmbedEinsumAndOtherOpsRunOnWorkers) {
  for (int workers : {1, 2, 4, 8}) CheckOnWorkers(MiscOps(), {{"ids", {4, 4}}}, workers);
}

}  // namespace
}  // namespace meshserve
