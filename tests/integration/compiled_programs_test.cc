// End to end on the real workers: compiled programs run on in-process
// ShardWorkers (server/worker/in_process_workers.h) that load the model and
// initialise their own param shards; outputs are compared with a full-tensor
// reference using the same initialisers and kernels.
#include "server/worker/testing/compiler_workers.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/initializers.h"
#include "nlohmann/json.hpp"
#include "server/compiler/compiler.h"
#include "server/compiler/program_emitter.h"
#include "server/compiler/testing/test_models.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT

// Gives every param without an init a random one, so outputs are not zeros.
std::string WithRandomInits(const std::string& json) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(json);
  for (auto& [name, p] : j["params"].items()) {
    if (!p.contains("init")) {
      p["init"] = "normal";
      p["stddev"] = 0.5;
    }
  }
  j["seed"] = 7;
  return j.dump();
}

void CheckOnWorkers(const std::string& file, const std::map<std::string, std::vector<int64_t>>& shapes,
                    int num_workers) {
  SCOPED_TRACE(std::to_string(num_workers) + " workers");
  std::string json = WithRandomInits(file);
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, shapes));
  std::vector<int64_t> device_workers = BlockWorkers(mesh.num_devices(), num_workers);
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, device_workers, {"e2e", 1}));
  std::map<std::string, Tensor> inputs;
  uint64_t seed = 1;
  for (const auto& [name, shape] : shapes) inputs[name] = RandomTensor(shape, seed++);
  std::map<std::string, Tensor> params;
  for (const ParamDef& p : m.params) {
    ASSERT_OK_AND_ASSIGN(params[p.name],
                         InitializeBox(InitSpec::FromParam(p), m.seed, p.name, p.shape,
                                       Box::FromShape(p.shape), p.dtype));
  }
  std::vector<SliceIr> slices;
  for (const InputSlice& s : cm.input_slices) {
    const Tensor& full = inputs.at(s.input);
    ASSERT_OK_AND_ASSIGN(BoxTensor whole, BoxTensor::Wrap(Box::FromShape(full.shape()), full));
    ASSERT_OK_AND_ASSIGN(std::string data, ExtractBox(whole, s.box));
    slices.push_back({s.input, s.device, BoxToIr(s.box), full.dtype(), data});
  }
  LoadModelIr load;
  load.model = m.name;
  load.model_json = json;
  load.generation = 1;
  for (const MeshAxis& a : mesh.axes()) load.mesh.push_back(MeshAxisIr{a.name, a.size, ""});
  load.device_workers = device_workers;
  auto outs = RunOnInProcessWorkers(num_workers, load, cm.programs, slices);
  ASSERT_TRUE(outs.ok()) << outs.status() << "\n" << cm.ToString();
  ASSERT_OK_AND_ASSIGN(auto want, Reference(m, inputs, params));
  for (const std::string& o : m.outputs) {
    const ArrayType& t = tm.TypeOf(o);
    ASSERT_OK_AND_ASSIGN(BoxTensor got, BoxTensor::Create(DType::kFloat32, Box::FromShape(t.shape)));
    int64_t covered = 0;
    for (const SliceIr& s : *outs) {
      if (s.name != o) continue;
      ASSERT_OK(InsertBox(&got, UncheckedBoxFromIr(s.box), s.data, false));
      covered += UncheckedBoxFromIr(s.box).NumElements();
    }
    EXPECT_EQ(covered, t.NumElements()) << o;
    EXPECT_LT(MaxAbsDiff(got.tensor, want.at(o)), 1e-3) << o << "\n" << cm.ToString();
  }
}

class CompilerOnWorkersTest : public ::testing::TestWithParam<int> {};

TEST_P(CompilerOnWorkersTest, SeedLinear) { CheckOnWorkers(SeedLinear(), {{"x", {16, 32}}}, GetParam()); }

TEST_P(CompilerOnWorkersTest, Swiglu) {
  CheckOnWorkers(Swiglu(16, 32), {{"x", {4, 2, 16}}}, GetParam());
}

TEST_P(CompilerOnWorkersTest, TransformerBlock) {
  CheckOnWorkers(TransformerBlock(), {{"x", {2, 4, 16}}}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Workers, CompilerOnWorkersTest, ::testing::Values(1, 2, 4, 8));

}  // namespace
}  // namespace meshserve
