// WorkerEngine over the IR with an InMemoryTransport: hand-written programs
// checked against naive references, and every error path.
#include "server/worker/worker_engine.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/ir_conv.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/sharding/box.h"
#include "common/tensor/initializers.h"
#include "common/tensor/safetensors.h"
#include "common/tensor/tensor.h"
#include "server/worker/testing/in_memory_transport.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;
using namespace ::meshserve::program_testing;  // NOLINT

constexpr int64_t kM = 4, kK = 8, kN = 6;
constexpr auto& B = IrBox;

// A program of the "mm" model: `id` at `generation` for `worker` (-1: any).
ProgramIr MmProgram(std::string id, std::vector<StepIr> steps = {}, int64_t generation = 1,
                    int64_t worker = -1) {
  ProgramIr p;
  p.program_id = std::move(id);
  p.model = "mm";
  p.generation = generation;
  p.worker = worker;
  p.steps = std::move(steps);
  return p;
}

// One step on worker 0 that waits for tag `tag`, which no peer ever sends
// unless the test delivers it.
std::vector<StepIr> WaitForTag(const std::string& tag) {
  return {Recv(0, "buf", B({{0, 4}}), tag, false, B({{0, 4}}), DType::kFloat32, 1)};
}

// y = x @ w with x [M, K] split over K (P(None, 'x')) and w [K, N] split over
// K (P('x', None)); y is reduce-scattered to P('x', None).
std::string MatmulModelJson(const std::string& extra = "") {
  return absl::StrReplaceAll(
      R"({'name': 'mm', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 7, EXTRA
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, 'x']}},
  'params': {'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'normal', 'stddev': 1.0},
             'r': {'shape': [6], 'sharding': [null], 'init': 'uniform', 'scale': 2.0}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': ['x', null]}],
  'outputs': ['y']})",
      {{"'", "\""}, {"EXTRA", extra}});
}

LoadModelIr MatmulLoad(std::vector<int64_t> devices, std::vector<int64_t> device_workers,
                       const std::string& json = MatmulModelJson()) {
  LoadModelIr load;
  load.model = "mm";
  load.generation = 1;
  load.model_json = json;
  load.mesh = {MeshAxisIr{"x", 2, ""}};
  load.devices = std::move(devices);
  load.device_workers = std::move(device_workers);
  return load;
}

// Worker d (device d): partial = x_d @ w_d; send the other half's rows of the
// partial sum to the peer; receive the peer's partial rows of my half and
// accumulate; output my half of y.
ProgramIr MatmulProgram(int64_t worker) {
  const int64_t other = 1 - worker;
  const int64_t half = kM / 2;
  ProgramIr p = MmProgram("mm-prog", {}, 1, worker);
  ComputeStepIr dot = Compute(worker, ComputeOp::kDotGeneral, {"in/x", "param/w"}, "partial",
                              B({{0, kM}, {0, kN}}));
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {0};
  dot.partial = true;
  p.steps.push_back(dot);
  p.steps.push_back(Send(worker, "partial", B({{other * half, (other + 1) * half}, {0, kN}}),
                         other, other, absl::StrCat("rs/", worker, "->", other)));
  p.steps.push_back(Recv(worker, "partial", B({{worker * half, (worker + 1) * half}, {0, kN}}),
                         absl::StrCat("rs/", other, "->", worker), /*accumulate=*/true,
                         B({{0, kM}, {0, kN}}), DType::kFloat32, other));
  p.steps.push_back(
      Output(worker, "partial", B({{worker * half, (worker + 1) * half}, {0, kN}}), "y"));
  return p;
}

std::vector<float> Iota(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 11 - 5);
  return v;
}

// x[:, d*K/2 : (d+1)*K/2] as a slice of device d.
SliceIr XSlice(const std::vector<float>& x, int64_t device) {
  const int64_t k0 = device * kK / 2, k1 = (device + 1) * kK / 2;
  std::vector<float> part;
  for (int64_t m = 0; m < kM; ++m) {
    for (int64_t k = k0; k < k1; ++k) part.push_back(x[m * kK + k]);
  }
  SliceIr s;
  s.name = "x";
  s.device = device;
  s.box = B({{0, kM}, {k0, k1}});
  s.dtype = DType::kFloat32;
  s.data.assign(reinterpret_cast<const char*>(part.data()), part.size() * sizeof(float));
  return s;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Naive y = x @ w in double.
std::vector<double> NaiveMatmul(const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<double> y(kM * kN, 0.0);
  for (int64_t m = 0; m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) {
      for (int64_t k = 0; k < kK; ++k) y[m * kN + n] += double{x[m * kK + k]} * w[k * kN + n];
    }
  }
  return y;
}

class TwoWorkers {
 public:
  explicit TwoWorkers(int64_t chunk_bytes = 0, absl::Duration default_deadline = absl::Seconds(20))
      : transport_(chunk_bytes) {
    for (int i = 0; i < 2; ++i) {
      WorkerEngine::Options options;
      options.worker_id = i;
      options.default_deadline = default_deadline;
      engines_.push_back(std::make_unique<WorkerEngine>(options, &transport_));
      transport_.Register(i, engines_.back().get());
    }
  }
  WorkerEngine& operator[](int i) { return *engines_[i]; }
  InMemoryTransport& transport() { return transport_; }

  absl::Status LoadAndInstall(const std::string& json = MatmulModelJson()) {
    for (int w = 0; w < 2; ++w) {
      absl::StatusOr<LoadModelResultIr> bytes =
          engines_[w]->LoadModel(MatmulLoad({w}, {0, 1}, json));
      if (!bytes.ok()) return bytes.status();
      absl::Status s = engines_[w]->InstallProgram(MatmulProgram(w));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Runs the matmul program on both workers concurrently; returns y [M, N].
  absl::StatusOr<std::vector<float>> RunMatmul(const std::vector<float>& x,
                                               const std::string& request_id) {
    absl::StatusOr<std::vector<SliceIr>> out[2];
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w]() {
        out[w] = engines_[w]->Execute("mm-prog", request_id, {XSlice(x, w)}, absl::ZeroDuration());
      });
    }
    for (auto& t : threads) t.join();
    std::vector<float> y(kM * kN, 0.f);
    for (int w = 0; w < 2; ++w) {
      if (!out[w].ok()) return out[w].status();
      if (out[w]->size() != 1) return absl::InternalError("expected one output slice");
      const SliceIr& s = (*out[w])[0];
      std::vector<float> rows = Floats(s.data);
      const int64_t m0 = s.box.begin[0];
      for (size_t i = 0; i < rows.size(); ++i) y[m0 * kN + i] = rows[i];
    }
    return y;
  }

 private:
  InMemoryTransport transport_;
  std::vector<std::unique_ptr<WorkerEngine>> engines_;
};

std::vector<float> FullParam(const std::string& name, std::vector<int64_t> shape,
                             InitSpec spec, int64_t seed) {
  absl::StatusOr<Tensor> t =
      InitializeBox(spec, seed, name, shape, Box::FromShape(shape), DType::kFloat32);
  EXPECT_THAT(t, IsOk());
  return t->ToFloatVector();
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

TEST(WorkerEngineTest, TwoWorkerDotGeneralWithReduceScatterMatchesNaive) {
  TwoWorkers cluster;
  ASSERT_OK(cluster.LoadAndInstall());
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  normal.stddev = 1.0;
  const std::vector<float> w = FullParam("w", {kK, kN}, normal, 7);
  const std::vector<float> x = Iota(kM * kK, 0.25f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, cluster.RunMatmul(x, "r1"));
  ExpectNear(y, NaiveMatmul(x, w));
  EXPECT_EQ(cluster.transport().slices_sent(), 2);
  EXPECT_EQ(cluster.transport().bytes_sent(), 2 * (kM / 2) * kN * 4);
}

TEST(WorkerEngineTest, ChunkedDeliveryGivesTheSameResult) {
  TwoWorkers cluster(/*chunk_bytes=*/5);  // odd chunk size: chunks split floats
  ASSERT_OK(cluster.LoadAndInstall());
  TwoWorkers whole;
  ASSERT_OK(whole.LoadAndInstall());
  const std::vector<float> x = Iota(kM * kK, 0.5f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> a, cluster.RunMatmul(x, "c"));
  ASSERT_OK_AND_ASSIGN(std::vector<float> b, whole.RunMatmul(x, "c"));
  EXPECT_EQ(a, b);
}

TEST(WorkerEngineTest, ConcurrentRequestsRunConcurrently) {
  TwoWorkers cluster;
  ASSERT_OK(cluster.LoadAndInstall());
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  const std::vector<float> w = FullParam("w", {kK, kN}, normal, 7);
  constexpr int kRequests = 16;
  std::vector<absl::StatusOr<std::vector<float>>> results(kRequests);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r]() {
      results[r] = cluster.RunMatmul(Iota(kM * kK, 0.1f * (r + 1)), absl::StrCat("req", r));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRequests; ++r) {
    ASSERT_THAT(results[r], IsOk());
    ExpectNear(*results[r], NaiveMatmul(Iota(kM * kK, 0.1f * (r + 1)), w));
  }
  EXPECT_EQ(cluster[0].Status().requests_served, kRequests);
  EXPECT_EQ(cluster[0].rendezvous().NumPendingSlices(), 0);
}

TEST(WorkerEngineTest, ParamsComeFromTheCheckpointWhenPresent) {
  const std::string path = ::testing::TempDir() + "/worker_engine_test_ckpt.safetensors";
  std::vector<float> w_values = Iota(kK * kN, 0.125f);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::FromValues(DType::kFloat32, {kK, kN}, w_values));
  ASSERT_OK(WriteSafetensors(path, {{"w", w}}));
  TwoWorkers cluster;
  ASSERT_OK(cluster.LoadAndInstall(MatmulModelJson(absl::StrCat("\"checkpoint\": \"", path, "\","))));
  const std::vector<float> x = Iota(kM * kK, 0.5f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, cluster.RunMatmul(x, "ck"));
  ExpectNear(y, NaiveMatmul(x, w_values));
  std::remove(path.c_str());
}

TEST(WorkerEngineTest, CheckpointShapeMismatchIsInvalidArgument) {
  const std::string path = ::testing::TempDir() + "/worker_engine_test_bad.safetensors";
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::Create(DType::kFloat32, {kK, kN + 1}));
  ASSERT_OK(WriteSafetensors(path, {{"w", w}}));
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  EXPECT_THAT(engine.LoadModel(MatmulLoad({0}, {0, 1}, MatmulModelJson(absl::StrCat(
                                                          "\"checkpoint\": \"", path, "\",")))),
              StatusIs(absl::StatusCode::kInvalidArgument, "shape [8, 7]"));
  std::remove(path.c_str());
}

TEST(WorkerEngineTest, DevicesWithIdenticalBoxesShareOneBuffer) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  // One worker hosts both devices: w is split (two boxes), r is replicated
  // (one shared box).
  ASSERT_OK_AND_ASSIGN(LoadModelResultIr loaded, engine.LoadModel(MatmulLoad({0, 1}, {0, 0})));
  EXPECT_EQ(loaded.param_bytes, (kK * kN + kN) * 4);
  WorkerStatusIr status = engine.Status();
  ASSERT_EQ(status.models.size(), 1u);
  EXPECT_EQ(status.models[0].devices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(status.worker_id, 0);
}

TEST(WorkerEngineTest, LocalCopyAndSendToSelfBetweenDevicesOfOneWorker) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(MatmulLoad({0, 1}, {0, 0})).status());
  ProgramIr p = MmProgram("local", {}, 1, 0);
  // w's rows [0:4) live on device 0, [4:8) on device 1: gather them on device 1.
  p.steps.push_back(Copy(0, "param/w", B({{0, 4}, {0, kN}}), 1, "full",
                         B({{0, kK}, {0, kN}}), DType::kFloat32));
  p.steps.push_back(Send(1, "param/w", B({{4, 8}, {0, kN}}), 0, 1, "self"));
  p.steps.push_back(Recv(1, "full", B({{4, 8}, {0, kN}}), "self", false, {}, std::nullopt, 0));
  p.steps.push_back(Output(1, "full", B({{0, kK}, {0, kN}}), "w"));
  ASSERT_OK(engine.InstallProgram(p));
  ASSERT_OK_AND_ASSIGN(std::vector<SliceIr> out,
                       engine.Execute("local", "r", {}, absl::Seconds(5)));
  ASSERT_EQ(out.size(), 1u);
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  EXPECT_EQ(Floats(out[0].data), FullParam("w", {kK, kN}, normal, 7));
}

// Uninstall drops the program (Status counts it no more) and an Execute then
// fails naming it; the model and the other programs stay.
TEST(WorkerEngineTest, UninstallDropsTheProgram) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(MatmulLoad({0, 1}, {0, 0})).status());
  ProgramIr p = MmProgram("", {Output(0, "param/w", B({{0, 4}, {0, kN}}), "w")}, 1, 0);
  for (const char* id : {"keep", "drop"}) {
    p.program_id = id;
    ASSERT_OK(engine.InstallProgram(p));
  }
  ASSERT_OK(engine.Execute("drop", "r1", {}, absl::Seconds(5)).status());
  EXPECT_EQ(engine.Status().programs, 2);
  ASSERT_OK(engine.UninstallProgram("drop"));
  EXPECT_EQ(engine.Status().programs, 1);
  EXPECT_THAT(engine.Execute("drop", "r2", {}, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kNotFound, "unknown program 'drop'"));
  EXPECT_THAT(engine.UninstallProgram("drop"),
              StatusIs(absl::StatusCode::kNotFound, "unknown program 'drop'"));
  ASSERT_OK_AND_ASSIGN(std::vector<SliceIr> out,
                       engine.Execute("keep", "r3", {}, absl::Seconds(5)));
  ASSERT_EQ(out.size(), 1u);
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  std::vector<float> w = FullParam("w", {kK, kN}, normal, 7);
  EXPECT_EQ(Floats(out[0].data), std::vector<float>(w.begin(), w.begin() + 4 * kN));
  // Installed again under the same id, it runs again.
  p.program_id = "drop";
  ASSERT_OK(engine.InstallProgram(p));
  EXPECT_OK(engine.Execute("drop", "r4", {}, absl::Seconds(5)).status());
}

// ---- error paths ----

class EngineErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(engine_.LoadModel(MatmulLoad({0}, {0, 1})).status());
  }
  // Installs a one-worker program with `steps` and runs it with x's slice.
  absl::Status Run(std::vector<StepIr> steps, std::vector<SliceIr> inputs = {},
                   absl::Duration timeout = absl::Seconds(5)) {
    ProgramIr p = MmProgram(absl::StrCat("p", ++counter_), std::move(steps), 1, 0);
    absl::Status s = engine_.InstallProgram(p);
    if (!s.ok()) return s;
    return engine_.Execute(p.program_id, absl::StrCat("req", counter_), std::move(inputs), timeout)
        .status();
  }
  SliceIr X() { return XSlice(Iota(kM * kK, 1.f), 0); }

  WorkerEngine engine_{WorkerEngine::Options(), nullptr};
  int counter_ = 0;
};

TEST_F(EngineErrorTest, UnknownProgramIsNotFound) {
  EXPECT_THAT(engine_.Execute("nope", "r", {}, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kNotFound, "unknown program 'nope'"));
}

TEST_F(EngineErrorTest, ModelNotLoadedIsFailedPrecondition) {
  ASSERT_OK(engine_.InstallProgram(MmProgram("g2", {}, 2)));
  EXPECT_THAT(engine_.Execute("g2", "r", {}, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "generation 2 is not loaded"));
}

TEST_F(EngineErrorTest, UnknownBufferIsNotFound) {
  EXPECT_THAT(Run({Compute(0, ComputeOp::kRelu, {"tmp"}, "y", B({{0, 1}}))}),
              StatusIs(absl::StatusCode::kNotFound, "unknown buffer 'tmp' on device 0"));
  EXPECT_THAT(Run({Compute(0, ComputeOp::kRelu, {"param/nope"}, "y", B({{0, 1}}))}),
              StatusIs(absl::StatusCode::kNotFound, "has no param 'nope'"));
}

TEST_F(EngineErrorTest, BoxOutsideBufferIsOutOfRange) {
  // Device 0 holds w rows [0:4); rows [4:8) are outside.
  EXPECT_THAT(Run({Output(0, "param/w", B({{4, 8}, {0, kN}}), "w")}),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(Run({Send(0, "param/w", B({{0, 5}, {0, kN}}), 0, 0, "t")}),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_F(EngineErrorTest, InputByteLengthMismatchIsInvalidArgument) {
  SliceIr x = X();
  x.data.pop_back();
  EXPECT_THAT(Run({}, {x}), StatusIs(absl::StatusCode::kInvalidArgument, "byte length"));
}

TEST_F(EngineErrorTest, InputOnDeviceNotHostedIsInvalidArgument) {
  SliceIr x = X();
  x.device = 1;
  EXPECT_THAT(Run({}, {x}), StatusIs(absl::StatusCode::kInvalidArgument, "not hosted"));
}

TEST_F(EngineErrorTest, StepOnDeviceNotHostedIsInvalidArgument) {
  EXPECT_THAT(Run({Output(1, "param/w", B({{4, 8}, {0, kN}}), "w")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "device 1 is not hosted"));
}

TEST_F(EngineErrorTest, PeerSliceWithWrongByteLengthIsInvalidArgument) {
  // A local "peer" sends 3 floats where the receive expects 4.
  ASSERT_OK(engine_.rendezvous().DeliverSlice("req1", "t", std::string(12, '\0'), 1));
  EXPECT_THAT(Run({Recv(0, "buf", B({{0, 4}}), "t", false, B({{0, 4}}), DType::kFloat32, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EngineErrorTest, RecvIntoBufferOfAnotherDTypeIsInvalidArgument) {
  ASSERT_OK(engine_.rendezvous().DeliverSlice("req1", "t", std::string(8, '\0'), 1));
  EXPECT_THAT(
      Run({Compute(0, ComputeOp::kZeros, {}, "buf", B({{0, 4}})),  // float32 (default)
           Recv(0, "buf", B({{0, 4}}), "t", false, B({{0, 4}}), DType::kBFloat16, 1)}),
      StatusIs(absl::StatusCode::kInvalidArgument, "dtype mismatch"));
}

TEST_F(EngineErrorTest, WritingAParamIsRejected) {
  EXPECT_THAT(Run({Compute(0, ComputeOp::kZeros, {}, "param/w", B({{0, 4}}))}),
              StatusIs(absl::StatusCode::kInvalidArgument, "read-only"));
}

TEST_F(EngineErrorTest, KernelShapeErrorsAreInvalidArgument) {
  ComputeStepIr dot =
      Compute(0, ComputeOp::kDotGeneral, {"in/x", "param/w"}, "y", B({{0, kM}, {0, kN}}));
  dot.lhs_contracting = {0};  // x's dim 0 has 4, w's dim 0 has 4 but x's local K is 4...
  dot.rhs_contracting = {1};  // ... w's dim 1 has 6: mismatch
  EXPECT_THAT(Run({dot}, {X()}), StatusIs(absl::StatusCode::kInvalidArgument));
  // A result whose shape is not out_box's.
  EXPECT_THAT(Run({Compute(0, ComputeOp::kRelu, {"in/x"}, "y", B({{0, 1}}))}, {X()}),
              StatusIs(absl::StatusCode::kInvalidArgument, "does not match out_box"));
}

TEST_F(EngineErrorTest, ReceiveWithoutSenderTimesOutThenNextRequestIsServed) {
  absl::Time start = absl::Now();
  EXPECT_THAT(Run({Recv(0, "buf", B({{0, 4}}), "never", false, B({{0, 4}}), DType::kFloat32, 1)},
                  {}, absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "no complete slice from worker 1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_THAT(Run({Output(0, "param/w", B({{0, 4}, {0, kN}}), "w")}), IsOk());
}

// ExecuteAsync does not hold the caller's thread while a receive waits: the
// slice's delivery runs the rest of the request, and `done`, on its thread.
TEST_F(EngineErrorTest, ExecuteAsyncReturnsWhileAReceiveWaits) {
  std::vector<StepIr> steps = WaitForTag("t");
  steps.push_back(Output(0, "buf", B({{0, 4}}), "y"));
  ASSERT_OK(engine_.InstallProgram(MmProgram("wait-out", std::move(steps))));
  absl::Notification done;
  absl::StatusOr<std::vector<SliceIr>> result;
  engine_.ExecuteAsync("wait-out", "ra", {}, absl::Seconds(30), 0,
                       [&](absl::StatusOr<std::vector<SliceIr>> out) {
                         result = std::move(out);
                         done.Notify();
                       });
  EXPECT_FALSE(done.HasBeenNotified());  // returned with the receive waiting
  const std::vector<float> sent = {1.f, -2.f, 3.5f, 4.f};
  std::string bytes(reinterpret_cast<const char*>(sent.data()), 16);
  ASSERT_OK(engine_.DeliverSlice("ra", "t", bytes, 1));
  // The delivery ran the output step and `done` before it returned.
  ASSERT_TRUE(done.HasBeenNotified());
  ASSERT_OK(result.status());
  ASSERT_EQ(result->size(), 1u);
  EXPECT_EQ((*result)[0].name, "y");
  EXPECT_EQ((*result)[0].data, bytes);
}

// The first run of a program goes to Options::executor (its compute time is
// unknown); once a run measured it quick, the next runs stay on the caller.
TEST(WorkerEngineExecutorTest, QuickProgramsStayOnTheCallersThread) {
  int scheduled = 0;
  WorkerEngine::Options options;
  options.executor = [&scheduled](std::function<void()> task) {
    ++scheduled;
    task();
  };
  WorkerEngine engine(options, nullptr);
  ASSERT_OK(engine.LoadModel(MatmulLoad({0}, {0, 1})).status());
  ASSERT_OK(
      engine.InstallProgram(MmProgram("out", {Output(0, "param/w", B({{0, 4}, {0, kN}}), "w")})));
  ASSERT_OK(engine.Execute("out", "r1", {}, absl::Seconds(5)).status());
  EXPECT_EQ(scheduled, 1);
  ASSERT_OK(engine.Execute("out", "r2", {}, absl::Seconds(5)).status());
  ASSERT_OK(engine.Execute("out", "r3", {}, absl::Seconds(5)).status());
  EXPECT_EQ(scheduled, 1);
}

// A run still waiting for a peer when its engine goes away ends with
// kCancelled instead of never answering.
TEST(WorkerEngineExecutorTest, DestroyingTheEngineEndsWaitingRuns) {
  absl::Notification done;
  absl::Status status;
  {
    WorkerEngine engine(WorkerEngine::Options(), nullptr);
    ASSERT_OK(engine.LoadModel(MatmulLoad({0}, {0, 1})).status());
    ASSERT_OK(engine.InstallProgram(MmProgram("wait", WaitForTag("never"))));
    engine.ExecuteAsync("wait", "rw", {}, absl::Seconds(30), 0,
                        [&](absl::StatusOr<std::vector<SliceIr>> out) {
                          status = out.status();
                          done.Notify();
                        });
    EXPECT_FALSE(done.HasBeenNotified());
  }
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled, "worker shutting down"));
}

TEST_F(EngineErrorTest, CancelAbortsAPendingReceive) {
  ASSERT_OK(engine_.InstallProgram(MmProgram("wait", WaitForTag("never"))));
  std::thread canceller([this]() {
    absl::SleepFor(absl::Milliseconds(100));
    engine_.Cancel("rc", "peer 1 failed");
  });
  absl::Time start = absl::Now();
  EXPECT_THAT(engine_.Execute("wait", "rc", {}, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kAborted, "peer 1 failed"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  canceller.join();
  // A cancel that arrives before the request fails it at once.
  engine_.Cancel("early", "coordinator gave up");
  EXPECT_THAT(engine_.Execute("wait", "early", {}, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kAborted, "coordinator gave up"));
}

TEST_F(EngineErrorTest, SameRequestIdTwiceIsAlreadyExists) {
  ASSERT_OK(engine_.InstallProgram(MmProgram("noop")));
  ASSERT_OK(engine_.Execute("noop", "dup", {}, absl::Seconds(1)).status());
  EXPECT_THAT(engine_.Execute("noop", "dup", {}, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(EngineErrorTest, SendWithoutTransportIsUnavailable) {
  EXPECT_THAT(Run({Send(0, "param/w", B({{0, 4}, {0, kN}}), 3, 0, "t")}),
              StatusIs(absl::StatusCode::kUnavailable, "worker 3"));
}

TEST_F(EngineErrorTest, RecvAndCopyConvertBetweenDTypesAndFreeOfAbsentBufferIsANoOp) {
  ProgramIr p = MmProgram("convert", {}, 1, 0);
  const BoxIr rows = B({{0, 4}, {0, kN}});
  // float32 param -> (send to self) -> bfloat16 buffer -> (copy) -> float32.
  p.steps.push_back(Send(0, "param/w", rows, 0, 0, "t"));
  p.steps.push_back(Recv(0, "h", rows, "t", false, rows, DType::kBFloat16, 0));
  p.steps.push_back(Copy(0, "h", rows, 0, "f", rows, DType::kFloat32));
  p.steps.push_back(Free(0, "never-created"));
  p.steps.push_back(Output(0, "h", rows, "h"));
  p.steps.push_back(Output(0, "f", rows, "f"));
  ASSERT_OK(engine_.InstallProgram(p));
  ASSERT_OK_AND_ASSIGN(std::vector<SliceIr> out,
                       engine_.Execute("convert", "cv", {}, absl::Seconds(5)));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dtype, DType::kBFloat16);
  EXPECT_EQ(out[0].data.size(), 4u * kN * 2);
  EXPECT_EQ(out[1].dtype, DType::kFloat32);
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  ASSERT_OK_AND_ASSIGN(Tensor w, InitializeBox(normal, 7, "w", {kK, kN},
                                               Box({Interval{0, 4}, Interval{0, kN}}),
                                               DType::kFloat32));
  ASSERT_OK_AND_ASSIGN(Tensor bf, ConvertDType(w, DType::kBFloat16));
  ASSERT_OK_AND_ASSIGN(Tensor back, ConvertDType(bf, DType::kFloat32));
  EXPECT_EQ(out[0].data, std::string(bf.bytes()));
  EXPECT_EQ(Floats(out[1].data), back.ToFloatVector());
  EXPECT_NE(Floats(out[1].data), w.ToFloatVector());  // really rounded
}

TEST(WorkerEngineTest, FailedSendFailsTheSenderAndTheReceiverTimesOut) {
  TwoWorkers cluster(0, absl::Milliseconds(300));
  ASSERT_OK(cluster.LoadAndInstall());
  cluster.transport().SetLinkDown(1, true);  // worker 0 cannot reach worker 1
  absl::StatusOr<std::vector<SliceIr>> out[2];
  std::thread t0([&]() {
    out[0] = cluster[0].Execute("mm-prog", "f", {XSlice(Iota(kM * kK, 1), 0)}, absl::ZeroDuration());
  });
  std::thread t1([&]() {
    out[1] = cluster[1].Execute("mm-prog", "f", {XSlice(Iota(kM * kK, 1), 1)}, absl::ZeroDuration());
  });
  t0.join();
  t1.join();
  EXPECT_THAT(out[0], StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  EXPECT_THAT(out[1], StatusIs(absl::StatusCode::kDeadlineExceeded));
  cluster.transport().SetLinkDown(1, false);
  const std::vector<float> x = Iota(kM * kK, 1);
  EXPECT_THAT(cluster.RunMatmul(x, "after"), IsOk());
}

TEST(ProgramValidationTest, BadProgramsAreRejectedAtInstall) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  auto install = [&](std::vector<StepIr> steps) {
    return engine.InstallProgram(MmProgram("bad", std::move(steps), 0));
  };
  EXPECT_THAT(install({Output(0, "a", B({{2, 1}}), "o")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "step 0"));
  EXPECT_THAT(
      install({Send(0, "a", B({{0, 1}}), 1, 0, "t"), Send(0, "a", B({{0, 1}}), 1, 0, "t")}),
      StatusIs(absl::StatusCode::kInvalidArgument, "tag 't' is used twice"));
  // (A dtype number tensor.proto lacks never reaches the IR: program_proto_test.)
}

TEST(LoadModelTest, BadRequestsAreRejected) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  EXPECT_THAT(engine.LoadModel(MatmulLoad({0}, {0, 1}, "{not json")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(engine.LoadModel(MatmulLoad({0}, {0})),
              StatusIs(absl::StatusCode::kInvalidArgument, "device_workers has 1 entries"));
  EXPECT_THAT(engine.LoadModel(MatmulLoad({2}, {0, 1})),
              StatusIs(absl::StatusCode::kOutOfRange, "device 2"));
  EXPECT_THAT(engine.LoadModel(MatmulLoad({0, 1}, {0, 1})),
              StatusIs(absl::StatusCode::kInvalidArgument, "different workers"));
  LoadModelIr wrong_mesh = MatmulLoad({0}, {0, 1, 1});
  wrong_mesh.mesh = {MeshAxisIr{"x", 3, ""}};
  EXPECT_THAT(engine.LoadModel(wrong_mesh),
              StatusIs(absl::StatusCode::kInvalidArgument, "does not match the model's mesh"));
  EXPECT_THAT(engine.UnloadModel("mm", 1), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(engine.LoadModel(MatmulLoad({1}, {0, 1})).status());
  EXPECT_EQ(engine.worker_id(), 1);
  EXPECT_THAT(engine.LoadModel(MatmulLoad({0}, {0, 1})),
              StatusIs(absl::StatusCode::kInvalidArgument, "this is worker 1"));
  EXPECT_OK(engine.UnloadModel("mm", -1));
  EXPECT_TRUE(engine.Status().models.empty());
}

}  // namespace
}  // namespace meshserve
