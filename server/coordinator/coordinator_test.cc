#include "server/coordinator/coordinator.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "server/coordinator/testing/test_models.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kIdent[] = R"({
  "name": "ident", "mesh": {"data": -1}, "dtype": "float32",
  "inputs": {"x": {"shape": [-1, 4], "sharding": ["data", null]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

constexpr char kRejected[] = R"({
  "name": "rejected", "mesh": {"data": 2}, "dtype": "float32",
  "inputs": {"x": {"shape": [8, 6], "sharding": ["data", null]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

std::string MakeModelDir() {
  static std::atomic<int> counter{0};
  const std::string dir = absl::StrCat(::testing::TempDir(), "/coord_models_", getpid(),
                                       "_", counter++);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
  };
  write("ident.json", kIdent);
  write("fixed.json", kFixedModelJson);
  write("rejected.json", kRejected);
  write("broken.json", "{ \"name\": \"broken\", ");
  write("notes.txt", "not a model");
  return dir;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.5f * i - 3.0f;
  return v;
}

InferRequest FixedRequest() {
  InferRequest r;
  r.model = "fixed";
  r.id = "t";
  r.inputs.push_back({"x", DType::kFloat32, {8, 6}, FloatBytes(Iota(48))});
  return r;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void StartCoordinator(bool control_thread = false,
                        absl::Duration heartbeat = absl::Milliseconds(500),
                        absl::Duration forget_dead_after = absl::Seconds(30)) {
    CoordinatorOptions options;
    options.forget_dead_after = forget_dead_after;
    options.model_dir = MakeModelDir();
    options.run_control_thread = control_thread;
    options.heartbeat_interval = heartbeat;
    options.rejoin_quiet = rejoin_quiet_;
    options.retry_wait = absl::Seconds(3);
    options.placement_retry_backoff = absl::Milliseconds(10);
    auto builder = std::make_unique<FakeModelCompiler>(std::set<std::string>{"rejected"});
    builder_ = builder.get();
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, cluster_.Factory(), std::move(builder)));
  }
  int64_t AddWorker(int i) {
    absl::StatusOr<int64_t> id =
        coordinator_->RegisterWorker(absl::StrCat("127.0.0.1:", 9000 + i), 2, 1 << 30, -1);
    EXPECT_OK(id.status());
    return *id;
  }
  // A coordinator with its control thread (50 ms heartbeat interval) and
  // workers 0 and 1 beating for 100 ms: the fixed model placed on both.
  std::pair<int64_t, int64_t> ServeOnTwoBeatingWorkers() {
    StartCoordinator(/*control_thread=*/true, absl::Milliseconds(50));
    const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
    KeepBeating({w0, w1});
    absl::SleepFor(absl::Milliseconds(100));
    return {w0, w1};
  }
  int64_t Generation(const std::string& model) {
    absl::StatusOr<ModelStatus> s = coordinator_->GetModelStatus(model);
    return s.ok() ? s->generation : -1;
  }
  void TearDown() override {
    stop_beats_ = true;
    if (beats_.joinable()) beats_.join();
  }
  // Heartbeats `ids` every 10 ms until the test ends or they are removed.
  void KeepBeating(std::vector<int64_t> ids) {
    {
      absl::MutexLock lock(&beating_mu_);
      beating_ = std::move(ids);
    }
    if (beats_.joinable()) return;
    beats_ = std::thread([this] {
      while (!stop_beats_) {
        std::vector<int64_t> ids;
        {
          absl::MutexLock lock(&beating_mu_);
          ids = beating_;
        }
        for (int64_t id : ids) coordinator_->Heartbeat(id, false);
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
  }

  FakeCluster cluster_;
  absl::Duration rejoin_quiet_ = absl::ZeroDuration();
  FakeModelCompiler* builder_ = nullptr;
  std::unique_ptr<Coordinator> coordinator_;
  std::atomic<bool> stop_beats_{false};
  absl::Mutex beating_mu_;
  std::vector<int64_t> beating_;
  std::thread beats_;
};

TEST_F(CoordinatorTest, CreateRejectsMissingModelDir) {
  CoordinatorOptions options;
  options.model_dir = "/nonexistent/models";
  EXPECT_THAT(Coordinator::Create(options, cluster_.Factory(),
                                  std::make_unique<FakeModelCompiler>()),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/models"));
}

TEST_F(CoordinatorTest, BadModelFilesAreReportedAndOthersServed) {
  StartCoordinator();
  std::map<std::string, ModelStatus> by_name;
  for (ModelStatus& s : coordinator_->ModelStatuses()) by_name[s.name] = s;
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_THAT(by_name["broken"].state, HasSubstr("error"));
  EXPECT_THAT(by_name["rejected"].state, HasSubstr("rejected by the fake rules"));
  EXPECT_THAT(by_name["ident"].state, HasSubstr("waiting for workers"));
  EXPECT_FALSE(coordinator_->IsReady());
  AddWorker(0);
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->IsReady());
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
  InferRequest r = FixedRequest();
  r.model = "rejected";
  EXPECT_THAT(coordinator_->Infer(r), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               "rejected by the fake rules"));
  r.model = "broken";
  EXPECT_THAT(coordinator_->Infer(r), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               "model 'broken' cannot be served"));
  r.model = "nope";
  EXPECT_THAT(coordinator_->Infer(r), StatusIs(absl::StatusCode::kNotFound, "'nope'"));
}

TEST_F(CoordinatorTest, ModelThatFailsToLoadOnWorkersIsAnErrorNotABlocker) {
  StartCoordinator();
  cluster_.Worker(0)->FailLoad("ident", absl::DataLossError("ident.safetensors: truncated"));
  AddWorker(0);
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->IsReady());
  ASSERT_OK_AND_ASSIGN(ModelStatus ident, coordinator_->GetModelStatus("ident"));
  EXPECT_THAT(ident.state, HasSubstr("truncated"));
  InferRequest r;
  r.model = "ident";
  r.inputs.push_back({"x", DType::kFloat32, {2, 4}, FloatBytes(Iota(8))});
  EXPECT_THAT(coordinator_->Infer(r),
              StatusIs(absl::StatusCode::kFailedPrecondition, "truncated"));
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
}

TEST_F(CoordinatorTest, InferBeforePlacementIsUnavailable) {
  StartCoordinator();
  EXPECT_THAT(coordinator_->Infer(FixedRequest()),
              StatusIs(absl::StatusCode::kUnavailable, "not placed"));
}

TEST_F(CoordinatorTest, PlacementResolvesMinusOneAndPacksDevicesContiguously) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(ModelStatus ident, coordinator_->GetModelStatus("ident"));
  EXPECT_EQ(ident.mesh, "mesh[data=2]");
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_EQ(fixed.mesh, "mesh[data=4,model=2]");
  EXPECT_THAT(fixed.placement->device_workers, ElementsAre(w0, w0, w0, w0, w1, w1, w1, w1));
  EXPECT_THAT(cluster_.Worker(w0)->loaded(),
              Contains(Pair(Pair("fixed", fixed.generation), ElementsAre(0, 1, 2, 3))));
  EXPECT_THAT(cluster_.Worker(w1)->loaded(),
              Contains(Pair(Pair("fixed", fixed.generation), ElementsAre(4, 5, 6, 7))));
  EXPECT_THAT(cluster_.Worker(w1)->loaded(),
              Contains(Pair(Pair("ident", ident.generation), ElementsAre(1))));
}

TEST_F(CoordinatorTest, MinWorkersDelaysPlacement) {
  CoordinatorOptions options;
  options.model_dir = MakeModelDir();
  options.run_control_thread = false;
  options.min_workers = 2;
  ASSERT_OK_AND_ASSIGN(coordinator_, Coordinator::Create(options, cluster_.Factory(),
                                                         std::make_unique<FakeModelCompiler>()));
  AddWorker(0);
  coordinator_->Tick();
  EXPECT_FALSE(coordinator_->IsReady());
  EXPECT_EQ(Generation("ident"), 0);
  AddWorker(1);
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->IsReady());
}

TEST_F(CoordinatorTest, InferSlicesRunsAndAssembles) {
  StartCoordinator();
  for (int i = 0; i < 3; ++i) AddWorker(i);
  coordinator_->Tick();
  for (const char* spec : {"", "P()", "P(None, 'model')", "P('model', None)",
                           "P(('data', 'model'))"}) {
    InferRequest r = FixedRequest();
    if (*spec) r.out_shardings["y"] = spec;
    ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(r));
    ASSERT_EQ(response.outputs.size(), 1u) << spec;
    EXPECT_EQ(response.outputs[0].tensor.name, "y");
    EXPECT_EQ(response.outputs[0].tensor.shape, (std::vector<int64_t>{8, 6}));
    EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes) << spec;
    EXPECT_EQ(response.id, "t");
  }
  InferRequest r = FixedRequest();
  r.out_shardings["y"] = "P(None, 'model')";
  ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(r));
  EXPECT_EQ(response.outputs[0].type_str, "float32[8,6@model]");
}

TEST_F(CoordinatorTest, ProgramsAreCompiledAndInstalledOnce) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  for (int i = 0; i < 3; ++i) ASSERT_OK(coordinator_->Infer(FixedRequest()).status());
  EXPECT_EQ(builder_->compiles(), 1);
  EXPECT_EQ(cluster_.Worker(w0)->install_calls(), 1);
  InferRequest r = FixedRequest();
  r.out_shardings["y"] = "P()";
  ASSERT_OK(coordinator_->Infer(r).status());
  EXPECT_EQ(builder_->compiles(), 2);
}

// The request checks themselves are in infer_request_test.cc; here: Infer
// runs them, and the compiler's checks of out_shardings against the mesh.
TEST_F(CoordinatorTest, BadRequestsGetInvalidArgumentNamingTheValue) {
  StartCoordinator();
  AddWorker(0);
  coordinator_->Tick();
  struct Case {
    std::function<void(InferRequest*)> mutate;
    std::string substr;
  };
  std::vector<Case> cases = {
      {[](InferRequest* r) { r->inputs[0].name = "z"; }, "has no input 'z' (inputs: x)"},
      {[](InferRequest* r) { r->out_shardings["y"] = "P('nope')"; }, "nope"},
      {[](InferRequest* r) { r->out_shardings["y"] = "P('data', 'data')"; }, "data"},
  };
  for (const Case& c : cases) {
    InferRequest r = FixedRequest();
    c.mutate(&r);
    EXPECT_THAT(coordinator_->Infer(r),
                StatusIs(absl::StatusCode::kInvalidArgument, c.substr));
  }
  // The coordinator still serves after all of them.
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
}

TEST_F(CoordinatorTest, WorkerJoinMakesNewGenerationAndUnloadsOld) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  const int64_t g1 = Generation("ident");
  coordinator_->Tick();
  EXPECT_EQ(Generation("ident"), g1) << "no membership change, no new generation";
  const int64_t w2 = AddWorker(2);
  coordinator_->Tick();
  const int64_t g2 = Generation("ident");
  EXPECT_GT(g2, g1);
  ASSERT_OK_AND_ASSIGN(ModelStatus ident, coordinator_->GetModelStatus("ident"));
  EXPECT_EQ(ident.mesh, "mesh[data=3]");
  EXPECT_THAT(cluster_.Worker(w2)->loaded(),
              Contains(Pair(Pair("ident", g2), ElementsAre(2))));
  ident = {};
  coordinator_->Tick();  // nobody holds g1 any more: unloaded
  EXPECT_THAT(cluster_.Worker(w0)->unloaded(), Contains(Pair("ident", g1)));
  InferRequest r;
  r.model = "ident";
  r.inputs.push_back({"x", DType::kFloat32, {6, 4}, FloatBytes(Iota(24))});
  ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(r));
  EXPECT_EQ(response.generation, g2);
  EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes);
}

TEST_F(CoordinatorTest, DeadWorkerIsReplacedAfterMissedHeartbeats) {
  StartCoordinator(/*control_thread=*/false, absl::Milliseconds(100));
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  const int64_t g1 = Generation("fixed");
  KeepBeating({w0});  // w1 goes silent
  absl::SleepFor(absl::Milliseconds(500));
  coordinator_->Tick();
  EXPECT_FALSE(coordinator_->registry().IsAlive(w1));
  const int64_t g2 = Generation("fixed");
  EXPECT_GT(g2, g1);
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_THAT(fixed.placement->device_workers, ::testing::Each(w0));
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
  // It comes back: re-registering keeps its id and triggers a new generation.
  ASSERT_OK_AND_ASSIGN(int64_t again,
                       coordinator_->RegisterWorker("127.0.0.1:9001", 2, 1 << 30, w1));
  EXPECT_EQ(again, w1);
  KeepBeating({w0, w1});
  coordinator_->Tick();
  EXPECT_GT(Generation("fixed"), g2);
}

// A killed worker's connection drops at once; the next tick probes it and
// replaces it, long before its heartbeats (30 s here) would have expired.
TEST_F(CoordinatorTest, DroppedConnectionIsProbedAtTheNextTick) {
  StartCoordinator(/*control_thread=*/false, absl::Seconds(30));
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  const int64_t g1 = Generation("fixed");
  // A drop on a worker that still answers its probe: it stays.
  cluster_.Worker(w0)->DropConnection();
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->registry().IsAlive(w0));
  EXPECT_FALSE(coordinator_->registry().IsSuspect(w0));
  EXPECT_EQ(Generation("fixed"), g1);
  // A drop without a failed probe does not kill: w1 is down but not dropped.
  cluster_.Worker(w1)->SetDown(true);
  coordinator_->Tick();
  EXPECT_TRUE(coordinator_->registry().IsAlive(w1));
  // The drop of the dead one: probed, dead, replaced in the same tick.
  cluster_.Worker(w1)->DropConnection();
  coordinator_->Tick();
  EXPECT_FALSE(coordinator_->registry().IsAlive(w1));
  EXPECT_GT(Generation("fixed"), g1);
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_THAT(fixed.placement->device_workers, ::testing::Each(w0));
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
}

// After a coordinator restart the workers register again with their ids, one
// by one: first placements wait until none has registered for a heartbeat
// interval, so a model is placed on all of them, not on the first one back.
TEST_F(CoordinatorTest, FirstPlacementWaitsForReturningWorkers) {
  rejoin_quiet_ = absl::Seconds(1);
  StartCoordinator(/*control_thread=*/false, absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(int64_t w3, coordinator_->RegisterWorker("127.0.0.1:9003", 2, 1 << 30, 3));
  EXPECT_EQ(w3, 3);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_FALSE(fixed.ready);
  EXPECT_THAT(fixed.state, ::testing::HasSubstr("waiting for returning workers"));
  ASSERT_OK_AND_ASSIGN(int64_t w4, coordinator_->RegisterWorker("127.0.0.1:9004", 2, 1 << 30, 4));
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_FALSE(fixed.ready);
  absl::SleepFor(absl::Milliseconds(1100));
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(fixed, coordinator_->GetModelStatus("fixed"));
  ASSERT_TRUE(fixed.ready) << fixed.state;
  EXPECT_THAT(fixed.placement->device_workers, ::testing::Contains(w3));
  EXPECT_THAT(fixed.placement->device_workers, ::testing::Contains(w4));
}

TEST_F(CoordinatorTest, DepartedWorkerIsForgottenOnceNoPlacementUsesIt) {
  StartCoordinator(/*control_thread=*/false, absl::Milliseconds(100),
                   /*forget_dead_after=*/absl::Seconds(3));
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  KeepBeating({w0, w1});
  coordinator_->Tick();
  ASSERT_EQ(coordinator_->registry().AllWorkers().size(), 2u);
  // w1 drains (SIGTERM), its devices move to w0, then it exits (goes silent).
  ASSERT_TRUE(coordinator_->Heartbeat(w1, /*draining=*/true));
  KeepBeating({w0});
  coordinator_->Tick();
  absl::SleepFor(absl::Milliseconds(400));
  coordinator_->Tick();
  EXPECT_FALSE(coordinator_->registry().IsAlive(w1));
  EXPECT_EQ(coordinator_->registry().AllWorkers().size(), 2u) << "listed until forget_dead_after";
  absl::SleepFor(absl::Seconds(3));
  coordinator_->Tick();
  std::vector<WorkerInfo> all = coordinator_->registry().AllWorkers();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].worker_id, w0);
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
  // The same process coming back re-registers (its heartbeat is refused first).
  EXPECT_FALSE(coordinator_->Heartbeat(w1, false));
  ASSERT_OK_AND_ASSIGN(int64_t again,
                       coordinator_->RegisterWorker("127.0.0.1:9001", 2, 1 << 30, w1));
  EXPECT_EQ(again, w1);
}

TEST_F(CoordinatorTest, DeadWorkerStillInAPlacementIsNotForgotten) {
  // Only worker: it dies, and no other worker can take its devices, so the
  // placement keeps naming it; it must stay listed (dead) however long.
  StartCoordinator(/*control_thread=*/false, absl::Milliseconds(100),
                   /*forget_dead_after=*/absl::ZeroDuration());
  const int64_t w0 = AddWorker(0);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  ASSERT_NE(fixed.placement, nullptr);
  absl::SleepFor(absl::Milliseconds(500));
  coordinator_->Tick();
  coordinator_->Tick();
  EXPECT_FALSE(coordinator_->registry().IsAlive(w0));
  ASSERT_OK_AND_ASSIGN(fixed, coordinator_->GetModelStatus("fixed"));
  if (fixed.placement != nullptr && fixed.placement->worker_addresses.count(w0)) {
    EXPECT_EQ(coordinator_->registry().AllWorkers().size(), 1u);
  } else {
    EXPECT_TRUE(coordinator_->registry().AllWorkers().empty());
  }
}

TEST_F(CoordinatorTest, DrainingWorkerGetsNoDevices) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  ASSERT_TRUE(coordinator_->Heartbeat(w1, /*draining=*/true));
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(ModelStatus fixed, coordinator_->GetModelStatus("fixed"));
  EXPECT_THAT(fixed.placement->device_workers, ::testing::Each(w0));
  EXPECT_FALSE(coordinator_->Heartbeat(12345, false)) << "unknown id must re-register";
}

TEST_F(CoordinatorTest, RequestsInFlightFinishOnTheirGeneration) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0);
  coordinator_->Tick();
  const int64_t g1 = Generation("fixed");
  cluster_.Worker(w0)->SetExecuteDelay(absl::Milliseconds(400));
  absl::StatusOr<InferResponse> slow = absl::UnknownError("not run");
  std::thread request([&] { slow = coordinator_->Infer(FixedRequest()); });
  absl::SleepFor(absl::Milliseconds(100));
  AddWorker(1);
  coordinator_->Tick();  // switches to g2 while the request runs on g1
  const int64_t g2 = Generation("fixed");
  EXPECT_GT(g2, g1);
  coordinator_->Tick();
  EXPECT_THAT(cluster_.Worker(w0)->unloaded(), ::testing::Not(Contains(Pair("fixed", g1))))
      << "g1 is still in use";
  request.join();
  ASSERT_OK(slow.status());
  EXPECT_EQ(slow->generation, g1);
  EXPECT_EQ(slow->outputs[0].tensor.bytes, FixedRequest().inputs[0].bytes);
  coordinator_->Tick();
  EXPECT_THAT(cluster_.Worker(w0)->unloaded(), Contains(Pair("fixed", g1)));
  cluster_.Worker(w0)->SetExecuteDelay(absl::ZeroDuration());
  ASSERT_OK_AND_ASSIGN(InferResponse fast, coordinator_->Infer(FixedRequest()));
  EXPECT_EQ(fast.generation, g2);
}

TEST_F(CoordinatorTest, FailingWorkerFailsRequestCancelsOthersThenServes) {
  const auto [w0, w1] = ServeOnTwoBeatingWorkers();
  ASSERT_TRUE(coordinator_->IsReady());
  cluster_.Worker(w1)->FailExecute(absl::UnavailableError("connection reset"));
  absl::StatusOr<InferResponse> failed = coordinator_->Infer(FixedRequest());
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kUnavailable,
                               absl::StrCat("worker ", w1, " (127.0.0.1:9001)")));
  EXPECT_THAT(failed.status().message(), HasSubstr("connection reset"));
  // The worker answers its probe, so the request was tried again on the same
  // generation up to the attempts' bound (InferPipeline::kMaxAttempts, 8);
  // each attempt cancelled the other worker's part.
  EXPECT_EQ(cluster_.Worker(w1)->execute_calls(), 8);
  EXPECT_EQ(cluster_.Worker(w0)->cancelled().size(), 8u);
  cluster_.Worker(w1)->FailExecute(absl::OkStatus());
  EXPECT_OK(coordinator_->Infer(FixedRequest()).status());
  // A worker error that is not a lost worker keeps its code and names it.
  cluster_.Worker(w1)->FailExecute(absl::FailedPreconditionError("unknown program"));
  EXPECT_THAT(coordinator_->Infer(FixedRequest()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("worker ", w1)));
}

TEST_F(CoordinatorTest, TransientWorkerFailureIsRetriedOnSameGeneration) {
  // A worker that joined the generation timed out dialling a peer once.
  const auto [w0, w1] = ServeOnTwoBeatingWorkers();
  const int64_t g1 = Generation("fixed");
  cluster_.Worker(w1)->FailExecute(
      absl::UnavailableError("connect to peer 127.0.0.1:9000 timed out"), /*times=*/1);
  ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(FixedRequest()));
  EXPECT_EQ(response.generation, g1);
  EXPECT_EQ(response.outputs[0].tensor.bytes, FixedRequest().inputs[0].bytes);
  EXPECT_EQ(cluster_.Worker(w1)->execute_calls(), 2);
  EXPECT_TRUE(coordinator_->registry().IsAlive(w1));
}

TEST_F(CoordinatorTest, DeadWorkerMidRequestIsRetriedOnNewGeneration) {
  const auto [w0, w1] = ServeOnTwoBeatingWorkers();
  const int64_t g1 = Generation("fixed");
  cluster_.Worker(w1)->SetDown(true);  // the process died
  KeepBeating({w0});
  ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(FixedRequest()));
  EXPECT_GT(response.generation, g1);
  EXPECT_EQ(response.outputs[0].tensor.bytes, FixedRequest().inputs[0].bytes);
  EXPECT_FALSE(coordinator_->registry().IsAlive(w1));
}

class CoordinatorConcurrencyTest : public CoordinatorTest,
                                   public ::testing::WithParamInterface<int> {};

TEST_P(CoordinatorConcurrencyTest, ManyRequestsInFlight) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  cluster_.Worker(w0)->SetExecuteDelay(absl::Milliseconds(5));
  const int threads = GetParam();
  std::atomic<int> ok{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        InferRequest r = FixedRequest();
        std::vector<float> v = Iota(48);
        for (float& f : v) f += t * 100 + i;
        r.inputs[0].bytes = FloatBytes(v);
        absl::StatusOr<InferResponse> response = coordinator_->Infer(r);
        if (response.ok() && response->outputs[0].tensor.bytes == r.inputs[0].bytes) ++ok;
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(ok, threads * 10);
  if (threads > 1) {
    EXPECT_GT(cluster_.Worker(w0)->max_concurrent_executes(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CoordinatorConcurrencyTest, ::testing::Values(1, 4, 16));

TEST_F(CoordinatorTest, WorkersViewAsksEachWorker) {
  StartCoordinator();
  const int64_t w0 = AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  std::vector<WorkerView> views = coordinator_->Workers();
  ASSERT_EQ(views.size(), 2u);
  ASSERT_OK(views[0].status.status());
  EXPECT_EQ(views[0].status->blas_core, "Fake");
  EXPECT_EQ(views[0].info.worker_id, w0);
  bool saw_fixed = false;
  for (const auto& h : views[0].placements) {
    if (h.model != "fixed") continue;
    saw_fixed = true;
    EXPECT_THAT(h.coords, ElementsAre("data=0,model=0", "data=0,model=1",
                                      "data=1,model=0", "data=1,model=1"));
  }
  EXPECT_TRUE(saw_fixed);
}

TEST_F(CoordinatorTest, DescribeUsesThePlacementMesh) {
  StartCoordinator();
  AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(DescribeResult d, coordinator_->Describe("ident", {{"x", {8, 4}}}));
  EXPECT_EQ(d.mesh, "mesh[data=2]");
  ASSERT_EQ(d.values.size(), 1u);
  EXPECT_EQ(d.values[0].type_str, "float32[8@data,4]");
  EXPECT_THAT(coordinator_->Describe("nope", {}), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(coordinator_->Describe("broken", {}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace meshserve
