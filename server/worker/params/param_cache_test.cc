// The worker's param cache (param_cache.h): the marks a program may carry, and
// runs of two engines over an InMemoryTransport in every ParamCacheMode,
// checked against a naive matmul of the param's values.
#include "server/worker/params/param_cache.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/metrics/metric_registry.h"
#include "common/tensor/initializers.h"
#include "server/worker/testing/in_memory_transport.h"
#include "server/worker/worker_engine.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using namespace ::meshserve::program_testing;  // NOLINT

constexpr int64_t kM = 3, kK = 8, kN = 6;
constexpr auto& B = IrBox;

// w [K, N] split by rows over x=2: worker d (device d) holds rows [4d, 4d+4).
std::string ModelJson() {
  return absl::StrReplaceAll(
      R"({'name': 'g', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 5,
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, null]}},
  'params': {'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'normal', 'stddev': 1.0}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': [null, null]}],
  'outputs': ['y']})",
      {{"'", "\""}});
}

BoxIr Rows(int64_t d) { return B({{4 * d, 4 * d + 4}, {0, kN}}); }

// Gathers w on every device (param-only: the copy, send, receive and the free
// of the gathered buffer), then y = x @ w_full and outputs y.
ProgramIr GatherProgram(int64_t worker) {
  const int64_t other = 1 - worker;
  const BoxIr full = B({{0, kK}, {0, kN}});
  ComputeStepIr dot = Compute(worker, ComputeOp::kDotGeneral, {"in/x", "wg"}, "y",
                              B({{0, kM}, {0, kN}}));
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {0};
  ProgramIr p = ProgramOf(
      "gather", "g", 1, worker,
      {Copy(worker, "param/w", Rows(worker), worker, "wg", full, DType::kFloat32),
       Send(worker, "param/w", Rows(worker), other, other, absl::StrCat("w", worker)),
       Recv(worker, "wg", Rows(other), absl::StrCat("w", other), false, full, DType::kFloat32,
            other),
       dot, Free(worker, "wg"), Output(worker, "y", B({{0, kM}, {0, kN}}), "y")});
  p.param_only_steps = {0, 1, 2, 4};
  return p;
}

std::vector<float> SeedW() {
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  normal.stddev = 1.0;
  absl::StatusOr<Tensor> t = InitializeBox(normal, 5, "w", {kK, kN},
                                           Box::FromShape({kK, kN}), DType::kFloat32);
  EXPECT_TRUE(t.ok()) << t.status();
  return t->ToFloatVector();
}

std::vector<float> X(float scale) {
  std::vector<float> x(kM * kK);
  for (size_t i = 0; i < x.size(); ++i) x[i] = scale * static_cast<float>(i % 5) - 1.0f;
  return x;
}

void ExpectMatmul(const std::string& bytes, const std::vector<float>& x,
                  const std::vector<float>& w) {
  ASSERT_EQ(bytes.size(), kM * kN * sizeof(float));
  std::vector<float> y(kM * kN);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  for (int64_t m = 0; m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) {
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) want += double{x[m * kK + k]} * w[k * kN + n];
      EXPECT_NEAR(y[m * kN + n], want, 1e-4 * (1 + std::abs(want))) << m << "," << n;
    }
  }
}

// The worker's meshserve_worker_param_cache_bytes (process-wide).
double KeptBytesGauge() {
  const std::string text = GlobalMetricRegistry().Exposition();
  const std::string key = "meshserve_worker_param_cache_bytes ";
  const size_t at = text.find("\n" + key);
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 1 + key.size()));
}

class ParamCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int w = 0; w < 2; ++w) {
      WorkerEngine::Options options;
      options.worker_id = w;
      options.default_deadline = absl::Seconds(20);
      engines_.push_back(std::make_unique<WorkerEngine>(options, &transport_));
      transport_.Register(w, engines_.back().get());
    }
    for (int w = 0; w < 2; ++w) {
      ASSERT_TRUE(engines_[w]->LoadModel(Load(w)).ok());
      ASSERT_TRUE(engines_[w]->InstallProgram(GatherProgram(w)).ok());
    }
  }

  LoadModelIr Load(int64_t w) {
    LoadModelIr load;
    load.model = "g";
    load.generation = 1;
    load.model_json = ModelJson();
    load.mesh = {MeshAxisIr{"x", 2, ""}};
    load.devices = {w};
    load.device_workers = {0, 1};
    return load;
  }

  // Runs "gather" on both workers at once; returns each worker's y bytes.
  std::vector<absl::StatusOr<std::string>> Run(const std::vector<float>& x, const std::string& id,
                                               ParamCacheMode mode) {
    std::vector<absl::StatusOr<std::string>> y(2, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w]() {
        SliceIr in;
        in.name = "x";
        in.device = w;
        in.box = B({{0, kM}, {0, kK}});
        in.dtype = DType::kFloat32;
        in.data.assign(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
        absl::StatusOr<std::vector<SliceIr>> out = engines_[w]->Execute(
            "gather", id, {std::move(in)}, absl::Seconds(5), 1, mode);
        if (!out.ok()) {
          y[w] = out.status();
        } else if (out->size() != 1) {
          y[w] = absl::InternalError("expected one output");
        } else {
          y[w] = std::move((*out)[0].data);
        }
      });
    }
    for (auto& t : threads) t.join();
    return y;
  }

  InMemoryTransport transport_;
  std::vector<std::unique_ptr<WorkerEngine>> engines_;
};

TEST_F(ParamCacheTest, FillThenUseSkipsTheGatherAndAnswersAsARunOfEveryStep) {
  const std::vector<float> w = SeedW();
  for (const auto& y : Run(X(0.5f), "off", ParamCacheMode::kOff)) {
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectMatmul(*y, X(0.5f), w);
  }
  const int64_t gather_slices = transport_.slices_sent();
  EXPECT_EQ(gather_slices, 2);  // one param box each way
  for (const auto& y : Run(X(0.75f), "fill", ParamCacheMode::kFill)) {
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectMatmul(*y, X(0.75f), w);
  }
  EXPECT_EQ(transport_.slices_sent(), 2 * gather_slices);
  for (float scale : {1.25f, -2.0f}) {
    for (const auto& y : Run(X(scale), absl::StrCat("use", scale), ParamCacheMode::kUse)) {
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectMatmul(*y, X(scale), w);
    }
  }
  EXPECT_EQ(transport_.slices_sent(), 2 * gather_slices);  // nothing moved for kUse
}

TEST_F(ParamCacheTest, UseBeforeFillIsFailedPreconditionOnEveryWorkerAtOnce) {
  for (const auto& y : Run(X(1), "use", ParamCacheMode::kUse)) {
    EXPECT_THAT(y, StatusIs(absl::StatusCode::kFailedPrecondition,
                            "before a FILL of this version"));
  }
  // Loading the version again drops what it kept.
  ASSERT_TRUE(Run(X(1), "fill", ParamCacheMode::kFill)[0].ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(engines_[w]->LoadModel(Load(w)).ok());
  EXPECT_THAT(Run(X(1), "use-after-reload", ParamCacheMode::kUse)[0],
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // So does installing the program again under its id: the new install may
  // compute other values. What the old one kept is freed with it.
  const double before = KeptBytesGauge();
  ASSERT_TRUE(Run(X(1), "fill2", ParamCacheMode::kFill)[0].ok());
  ASSERT_TRUE(Run(X(1), "use2", ParamCacheMode::kUse)[0].ok());
  EXPECT_EQ(KeptBytesGauge(), before + 2 * kK * kN * 4);  // w gathered on both workers
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(engines_[w]->InstallProgram(GatherProgram(w)).ok());
  EXPECT_EQ(KeptBytesGauge(), before);
  EXPECT_THAT(Run(X(1), "use-after-install", ParamCacheMode::kUse)[1],
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ParamCacheTest, ANewVersionKeepsNothingOfTheOld) {
  ASSERT_TRUE(Run(X(1), "fill", ParamCacheMode::kFill)[1].ok());
  // Version 2 with w doubled, pushed to each worker's own rows.
  std::vector<float> w2 = SeedW();
  for (float& v : w2) v *= 2;
  for (int d = 0; d < 2; ++d) {
    std::string rows(reinterpret_cast<const char*>(w2.data() + 4 * d * kN), 4 * kN * sizeof(float));
    ASSERT_TRUE(engines_[d]
                    ->StageParams(StageChunkIr{"g", 1, 2, "w", Rows(d),
                                               static_cast<int64_t>(rows.size()), 0, rows})
                    .ok());
    ASSERT_TRUE(engines_[d]->CommitParams(CommitParamsIr{"g", 1, 1, 2, {"w"}, {}}).ok());
  }
  // Execute's version argument is 1 in Run; version 2 runs through the engine directly.
  auto run_v2 = [&](const std::string& id, ParamCacheMode mode) {
    std::vector<absl::StatusOr<std::vector<SliceIr>>> out(2, absl::UnknownError(""));
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w]() {
        const std::vector<float> x = X(1);
        SliceIr in{"x", w, B({{0, kM}, {0, kK}}), DType::kFloat32,
                   std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4)};
        out[w] = engines_[w]->Execute("gather", id, {in}, absl::Seconds(5), 2, mode);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  EXPECT_THAT(run_v2("v2-use", ParamCacheMode::kUse)[0],
              StatusIs(absl::StatusCode::kFailedPrecondition, "version 2"));
  for (const auto& out : run_v2("v2-fill", ParamCacheMode::kFill)) {
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectMatmul((*out)[0].data, X(1), w2);
  }
  for (const auto& out : run_v2("v2-use2", ParamCacheMode::kUse)) {
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectMatmul((*out)[0].data, X(1), w2);
  }
  // Version 1 still answers with its own kept gather.
  for (const auto& y : Run(X(1), "v1-use", ParamCacheMode::kUse)) {
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectMatmul(*y, X(1), SeedW());
  }
}

TEST(AnalyzeParamOnlyStepsTest, KeepsTheMarkedBuffersThatUnmarkedStepsRead) {
  absl::StatusOr<ParamOnlySteps> steps = AnalyzeParamOnlySteps(GatherProgram(0));
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT(steps->marked, ::testing::ElementsAre(true, true, true, false, true, false));
  EXPECT_THAT(steps->kept, ::testing::UnorderedElementsAre(RunBufferKey{0, "wg"}));
}

TEST(AnalyzeParamOnlyStepsTest, RejectsMarksThatDoNotDependOnParamsAlone) {
  struct Case {
    std::vector<int64_t> marks;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{0, 2, 3}, "step 3 touches buffer 'in/x'"},       // the dot reads the input
           {{1, 0}, "out of order"},
           {{0, 9}, "outside its 6 steps"},
           {{5}, "step 5 is an output step"},
           {{0, 1, 4}, "step 0 touches buffer 'wg'"},           // its receive is not marked
           {{0, 1, 2}, ""},                                      // the free may stay unmarked
       }) {
    ProgramIr p = GatherProgram(0);
    p.param_only_steps = c.marks;
    absl::StatusOr<ParamOnlySteps> steps = AnalyzeParamOnlySteps(p);
    if (c.error.empty()) {
      EXPECT_TRUE(steps.ok()) << steps.status();
    } else {
      EXPECT_THAT(steps, StatusIs(absl::StatusCode::kInvalidArgument, c.error))
          << ::testing::PrintToString(c.marks);
    }
  }
  // A buffer written by a marked copy and an unmarked one.
  ProgramIr mixed = GatherProgram(0);
  mixed.steps.insert(mixed.steps.begin() + 3,
                     Copy(0, "in/x", B({{0, 1}, {0, 1}}), 0, "wg", B({{0, kK}, {0, kN}}),
                          DType::kFloat32));
  mixed.param_only_steps = {0, 1, 2};
  EXPECT_THAT(AnalyzeParamOnlySteps(mixed),
              StatusIs(absl::StatusCode::kInvalidArgument, "step 0 touches buffer 'wg'"));
}

TEST(KeptParamBuffersTest, TheFirstKeepStaysAndACopyStartsEmpty) {
  KeptParamBuffers kept;
  auto one = std::make_shared<KeptBuffers>();
  (*one)[{0, "a"}] = *BoxTensor::Create(DType::kFloat32, Box::FromShape({2, 2}));
  kept.Keep("p", one);
  kept.Keep("p", std::make_shared<KeptBuffers>());
  EXPECT_EQ(kept.Find("p"), one);
  EXPECT_EQ(kept.bytes(), 16);
  EXPECT_EQ(kept.Find("q"), nullptr);
  KeptParamBuffers copy(kept);
  EXPECT_EQ(copy.Find("p"), nullptr);
  EXPECT_EQ(copy.bytes(), 0);
}

TEST(KeptParamBuffersTest, TheWorkerGaugeCountsWhatLiveVersionsKeep) {
  const double before = KeptBytesGauge();
  {
    KeptParamBuffers kept;
    auto one = std::make_shared<KeptBuffers>();
    (*one)[{0, "a"}] = *BoxTensor::Create(DType::kFloat32, Box::FromShape({4, 8}));
    kept.Keep("p", one);
    EXPECT_EQ(KeptBytesGauge(), before + 128);
  }
  EXPECT_EQ(KeptBytesGauge(), before);
}

}  // namespace
}  // namespace meshserve
