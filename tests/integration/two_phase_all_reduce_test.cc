// The two-phase all-reduce (reduce-scatter then all-gather; reshard_plan.h) on
// real workers: programs emitted by the compiler's ProgramEmitter run on
// in-process WorkerEngines (server/worker/testing/compiler_workers.h), and
// every device's result is compared with the sum of the partials computed
// here in double precision. Also a compiled model whose all-reduce is large
// enough that the default cost model picks the two-phase form: its plan
// (what `describe` prints) names the form and its bytes, and its programs
// (in the reference interpreter) match the full-tensor reference.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "server/compiler/compiler.h"
#include "server/compiler/program_emitter.h"
#include "server/compiler/testing/test_models.h"
#include "server/worker/testing/compiler_workers.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT

// A model the workers can load on mesh[x=n] (the programs below ignore it).
std::string LoadableModel(int64_t num_devices) {
  return absl::StrCat(R"({"name": "ar", "mesh": {"x": )", num_devices, R"(},
    "inputs": {"x": {"shape": [-1, 8]}},
    "params": {"k": {"shape": [8, 8], "sharding": [null, "x"], "init": "ones"}},
    "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "k"}],
    "outputs": ["y"]})");
}

LoadModelIr Load(const std::string& json, const Mesh& mesh,
                 const std::vector<int64_t>& device_workers) {
  LoadModelIr load;
  load.model = "ar";
  load.model_json = json;
  load.generation = 1;
  for (const MeshAxis& a : mesh.axes()) load.mesh.push_back(MeshAxisIr{a.name, a.size, ""});
  load.device_workers = device_workers;
  return load;
}

// Partial value of device d at element e (distinct per device, not integers).
float PartialValue(int64_t d, int64_t e) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(e) + 1.3 * d) * (d + 1));
}

// All-reduces a [rows, cols] float32 array of per-device partials (unreduced
// over x) onto every device, in `form`, on `num_workers` workers.
void CheckAllReduceOnWorkers(int64_t num_devices, int num_workers, int64_t rows, int64_t cols,
                             AllReduceForm form, const std::string& want_pattern) {
  SCOPED_TRACE(absl::StrCat(num_devices, " devices on ", num_workers, " workers, ", want_pattern));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"x", num_devices}}));
  const std::vector<int64_t> device_workers = BlockWorkers(num_devices, num_workers);
  ProgramEmitter emitter(mesh, device_workers, "ar");
  ReshardOptions options;
  options.all_reduce = form;
  emitter.set_reshard_options(options);
  const std::vector<int64_t> shape = {rows, cols};
  Placed src{InputBuffer("x"), shape, ShardingOf(mesh, 2, {}, {"x"}), DType::kFloat32};
  LayerPlanInfo info;
  ASSERT_OK_AND_ASSIGN(Placed out, emitter.Reshard(src, ShardingOf(mesh, 2, {}), DType::kFloat32,
                                                   "x", "all-reduce", &info));
  ASSERT_EQ(info.collectives.size(), 1u);
  EXPECT_EQ(info.collectives[0].pattern, want_pattern);
  for (int64_t d = 0; d < num_devices; ++d) {
    emitter.AddOutput(d, out.buffer, out.BoxFor(d), "y");
  }
  emitter.FreeTemporaries({});
  std::map<int64_t, ProgramIr> programs = emitter.TakePrograms();
  for (auto& [w, p] : programs) {
    p.model = "ar";
    p.generation = 1;
  }

  const int64_t n = rows * cols;
  std::vector<SliceIr> inputs;
  for (int64_t d = 0; d < num_devices; ++d) {
    std::vector<float> values(n);
    for (int64_t e = 0; e < n; ++e) values[e] = PartialValue(d, e);
    std::string data(n * sizeof(float), '\0');
    std::memcpy(data.data(), values.data(), data.size());
    inputs.push_back({"x", d, BoxIr{{0, 0}, {rows, cols}}, DType::kFloat32, std::move(data)});
  }
  const std::string json = LoadableModel(num_devices);
  auto outs = RunOnInProcessWorkers(num_workers, Load(json, mesh, device_workers), programs,
                                    inputs);
  ASSERT_TRUE(outs.ok()) << outs.status();
  std::map<int64_t, int> seen;
  for (const SliceIr& s : *outs) {
    ASSERT_EQ(s.name, "y");
    ASSERT_EQ(s.box.begin, (std::vector<int64_t>{0, 0}));
    ASSERT_EQ(s.box.end, (std::vector<int64_t>{rows, cols}));
    ASSERT_EQ(s.data.size(), n * sizeof(float));
    ++seen[s.device];
    std::vector<float> got(n);
    std::memcpy(got.data(), s.data.data(), s.data.size());
    for (int64_t e = 0; e < n; ++e) {
      double want = 0;
      for (int64_t d = 0; d < num_devices; ++d) want += PartialValue(d, e);
      ASSERT_NEAR(got[e], want, 1e-4) << "device " << s.device << " element " << e;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), num_devices);
}

TEST(TwoPhaseAllReduceTest, FourWorkersSumLikeTheReference) {
  CheckAllReduceOnWorkers(4, 4, 3, 40, AllReduceForm::kTwoPhase,
                          "all-reduce (reduce-scatter + all-gather)");
}

TEST(TwoPhaseAllReduceTest, EightDevicesOnFourWorkersSumLikeTheReference) {
  // Two devices per worker: pre-added partials, local forwards after.
  CheckAllReduceOnWorkers(8, 4, 5, 12, AllReduceForm::kTwoPhase,
                          "all-reduce (reduce-scatter + all-gather)");
}

TEST(TwoPhaseAllReduceTest, SixWorkersWithFewerChunksThanWorkers) {
  // The longest dim (4) is shorter than 6 workers: 4 chunks.
  CheckAllReduceOnWorkers(6, 6, 2, 4, AllReduceForm::kTwoPhase,
                          "all-reduce (reduce-scatter + all-gather)");
}

TEST(TwoPhaseAllReduceTest, DirectFormStillSumsLikeTheReference) {
  CheckAllReduceOnWorkers(4, 4, 3, 40, AllReduceForm::kDirect, "all-reduce");
}

// Column- then row-parallel linears on mesh[model=4]: y is all-reduced. At
// 64 x 1024 float32 (256 KiB) the default cost model picks the two-phase form.
std::string RowParallelModel() {
  return Json(R"({'name': 'mlp', 'mesh': {'model': 4}, 'seed': 7,
    'inputs': {'x': {'shape': [-1, 1024]}},
    'params': {
      'w1': {'shape': [1024, 512], 'sharding': [null, 'model'], 'init': 'normal', 'stddev': 0.05},
      'w2': {'shape': [512, 1024], 'sharding': ['model', null], 'init': 'normal', 'stddev': 0.5}},
    'layers': [
      {'name': 'h', 'op': 'linear', 'input': 'x', 'kernel': 'w1'},
      {'name': 'y', 'op': 'linear', 'input': 'h', 'kernel': 'w2', 'out_sharding': [null, null]}],
    'outputs': ['y']})");
}

TEST(TwoPhaseAllReduceTest, CompiledModelChoosesTwoPhaseAndMatchesTheReference) {
  const std::string json = RowParallelModel();
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 4));
  const std::map<std::string, std::vector<int64_t>> shapes = {{"x", {64, 1024}}};
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, shapes));
  const std::vector<int64_t> device_workers = BlockWorkers(4, 4);
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, device_workers, {"e2e", 1}));
  // describe's text: the form and its bytes, 2 (k - 1) |y| = 6 * 256 KiB.
  EXPECT_THAT(cm.ToString(),
              ::testing::HasSubstr("all-reduce (reduce-scatter + all-gather), 1572864 bytes"))
      << cm.ToString();

  // The programs (run by the reference interpreter here; the workers run
  // the same steps in the tests above) against the full-tensor reference,
  // and the bytes they really send.
  InterpreterStats stats;
  ExpectPlanMatchesReference(m, tm, cm, shapes, &stats);
  EXPECT_EQ(stats.network_bytes, cm.bytes_moved);
}

}  // namespace
}  // namespace meshserve
