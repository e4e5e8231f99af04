// The coordinator's resource limits over fake workers: the cluster-wide cap on
// pushes in progress (--max_concurrent_pushes) beside the one-push-per-model
// rule, and a worker's RESOURCE_EXHAUSTED (its in-flight slice budget, see
// server/worker/rendezvous.h) answered to the client as is: not a worker
// failure, no suspect, no retry, and the next request served; the param
// cache's modes (a kUse a worker refuses runs once more as a kFill); and the
// program cache's bound (--max_cached_programs: evicted programs are
// uninstalled from their workers, a program a worker lost is installed again).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/ir_conv.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A model with one replicated param `s`, named `name`.
std::string ModelJson(const std::string& name) {
  return absl::StrCat(R"({"name": ")", name, R"(", "mesh": {"data": 2}, "dtype": "float32",
    "inputs": {"x": {"shape": [-1, 2], "sharding": ["data", null]}},
    "params": {"s": {"shape": [5], "sharding": [null]}},
    "layers": [{"name": "y", "op": "relu", "input": "x"}],
    "outputs": ["y"]})");
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class LimitsTest : public ::testing::Test {
 protected:
  static constexpr int kModels = 3;

  absl::Status Start(int max_concurrent_pushes) {
    const std::string dir = absl::StrCat(::testing::TempDir(), "/limits_", getpid(), "_",
                                         counter_++);
    std::filesystem::create_directories(dir);
    for (int i = 0; i < kModels; ++i) {
      std::ofstream(absl::StrCat(dir, "/m", i, ".json")) << ModelJson(absl::StrCat("m", i));
    }
    CoordinatorOptions options;
    options.model_dir = dir;
    options.run_control_thread = false;
    options.heartbeat_interval = absl::Seconds(30);  // registered workers stay alive
    options.placement_retry_backoff = absl::Milliseconds(1);
    options.max_concurrent_pushes = max_concurrent_pushes;
    options.max_cached_programs = max_cached_programs_;
    auto compiler = std::make_unique<FakeModelCompiler>();
    compiler->set_kept_param_bytes(kept_param_bytes_);
    absl::StatusOr<std::unique_ptr<Coordinator>> c =
        Coordinator::Create(options, cluster_.Factory(), std::move(compiler));
    if (!c.ok()) return c.status();
    coordinator_ = *std::move(c);
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<int64_t> id = coordinator_->RegisterWorker(
          absl::StrCat("127.0.0.1:", 9300 + i), 2, 1 << 30, -1);
      if (!id.ok()) return id.status();
      workers_.push_back(*id);
    }
    coordinator_->Tick();
    if (!coordinator_->IsReady()) return absl::InternalError("models not placed");
    return absl::OkStatus();
  }
  int64_t Version(const std::string& model) {
    absl::StatusOr<ModelStatus> s = coordinator_->GetModelStatus(model);
    EXPECT_OK(s.status());
    return s.ok() ? s->version : -1;
  }
  // The whole of `s` pushed and committed through `push`.
  absl::Status FinishWith(ParamPush& push, float base) {
    PushChunk chunk{push.model(), "s", {0}, {5}, DType::kFloat32, 0,
                    FloatBytes({base, base + 1, base + 2, base + 3, base + 4})};
    if (absl::Status s = push.Add(std::move(chunk)); !s.ok()) return s;
    return push.Finish().status();
  }
  static InferRequest Request(const std::string& model) {
    InferRequest r;
    r.model = model;
    r.id = "limits";
    r.inputs.push_back({"x", DType::kFloat32, {4, 2}, FloatBytes({1, 2, 3, 4, 5, 6, 7, 8})});
    return r;
  }

  static inline int counter_ = 0;
  int64_t kept_param_bytes_ = 0;  // what the fake compiler's plans keep (Start)
  int64_t max_cached_programs_ = 256;
  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<int64_t> workers_;
};

TEST_F(LimitsTest, PushesBeyondTheClusterCapAreRefusedAndTheSlotsFreeAgain) {
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> p0, coordinator_->BeginPush("m0"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> p1, coordinator_->BeginPush("m1"));
  absl::Status over = coordinator_->BeginPush("m2").status();
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(std::string(over.message()),
              AllOf(HasSubstr("model 'm2'"), HasSubstr("2 pushes in progress"),
                    HasSubstr("--max_concurrent_pushes=2")));
  // The per-model rule is unchanged and comes first.
  EXPECT_THAT(coordinator_->BeginPush("m0"), StatusIs(absl::StatusCode::kAborted));

  // A push that committed frees its slot once it is over.
  ASSERT_OK(FinishWith(*p0, 10));
  p0.reset();
  EXPECT_EQ(Version("m0"), 2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> p2, coordinator_->BeginPush("m2"));
  EXPECT_THAT(coordinator_->BeginPush("m0"), StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK(FinishWith(*p2, 20));
  p2.reset();
  EXPECT_EQ(Version("m2"), 2);

  // A push dropped unfinished (aborted) frees its slot too, and changed nothing.
  p1.reset();
  EXPECT_EQ(Version("m1"), 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> again0, coordinator_->BeginPush("m0"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> again1, coordinator_->BeginPush("m1"));
  ASSERT_OK(FinishWith(*again1, 30));
  EXPECT_EQ(Version("m1"), 2);
}

TEST_F(LimitsTest, ACapOfOneAdmitsOnePushAtATime) {
  ASSERT_OK(Start(/*max_concurrent_pushes=*/1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> p0, coordinator_->BeginPush("m0"));
  EXPECT_THAT(coordinator_->BeginPush("m1"),
              StatusIs(absl::StatusCode::kResourceExhausted, "--max_concurrent_pushes=1"));
  p0.reset();
  EXPECT_OK(coordinator_->BeginPush("m1").status());
}

TEST_F(LimitsTest, CreateRejectsACapBelowOne) {
  EXPECT_THAT(Start(/*max_concurrent_pushes=*/0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "max_concurrent_pushes must be >= 1, got 0"));
}

TEST_F(LimitsTest, AWorkersResourceExhaustedGoesToTheClientWithoutSuspectOrRetry) {
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  const std::string refusal =
      "request 'r' tag 't3' from worker 1: a slice of 4096 bytes does not fit: 0 of this "
      "worker's 1024 bytes for slices in flight are in use (--max_inflight_slice_bytes=1024)";
  cluster_.Worker(workers_[0])->FailExecute(absl::ResourceExhaustedError(refusal), 1);
  const int calls_before = cluster_.Worker(workers_[0])->execute_calls();
  absl::StatusOr<InferResponse> refused = coordinator_->Infer(Request("m0"));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted,
                                "--max_inflight_slice_bytes=1024"));
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[0]));
  EXPECT_TRUE(coordinator_->registry().IsAlive(workers_[0]));
  EXPECT_EQ(cluster_.Worker(workers_[0])->execute_calls(), calls_before + 1);  // not retried
  // The next request is served right (relu of positive inputs: the inputs).
  absl::StatusOr<InferResponse> served = coordinator_->Infer(Request("m0"));
  ASSERT_OK(served.status());
  ASSERT_EQ(served->outputs.size(), 1u);
  EXPECT_EQ(served->outputs[0].tensor.bytes, FloatBytes({1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_F(LimitsTest, AParamCacheUseAWorkerRefusesRunsOnceMoreAsAFill) {
  kept_param_bytes_ = 64;  // every plan keeps something: the cache is on
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  ASSERT_OK(coordinator_->Infer(Request("m0")).status());
  ASSERT_OK(coordinator_->Infer(Request("m0")).status());
  // The worker lost what it kept (e.g. its version was loaded again).
  cluster_.Worker(workers_[0])->FailExecute(
      absl::FailedPreconditionError("nothing kept for model 'm0'"), 1);
  absl::StatusOr<InferResponse> served = coordinator_->Infer(Request("m0"));
  ASSERT_OK(served.status());
  ASSERT_EQ(served->outputs.size(), 1u);
  EXPECT_EQ(served->outputs[0].tensor.bytes, FloatBytes({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[0]));
  ASSERT_OK(coordinator_->Infer(Request("m0")).status());
  using M = ParamCacheMode;
  for (int64_t w : workers_) {
    EXPECT_THAT(cluster_.Worker(w)->param_cache_modes(),
                ::testing::ElementsAre(M::kFill, M::kUse, M::kUse, M::kFill, M::kUse))
        << "worker " << w;
  }
}

TEST_F(LimitsTest, ParamCacheOffUnlessAPlanKeepsSomething) {
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));  // the fake plans keep nothing
  ASSERT_OK(coordinator_->Infer(Request("m0")).status());
  ASSERT_OK(coordinator_->Infer(Request("m0")).status());
  EXPECT_THAT(cluster_.Worker(workers_[0])->param_cache_modes(),
              ::testing::ElementsAre(ParamCacheMode::kOff, ParamCacheMode::kOff));
}

// x of `rows` rows, all positive (so relu(x), the reference, is x).
InferRequest RowsRequest(const std::string& model, int64_t rows, float base) {
  InferRequest r;
  r.model = model;
  r.id = absl::StrCat("rows", rows);
  std::vector<float> x(rows * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = base + static_cast<float>(i);
  r.inputs.push_back({"x", DType::kFloat32, {rows, 2}, FloatBytes(x)});
  return r;
}

// The programs each worker has installed once the coordinator's uninstalls
// (asynchronous) are done: waits (at most 10 s) until none has more than
// `bound`, then returns the largest count.
size_t MostInstalled(FakeCluster& cluster, const std::vector<int64_t>& workers, size_t bound) {
  size_t most = 0;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10); absl::Now() < give_up;) {
    most = 0;
    for (int64_t w : workers) most = std::max(most, cluster.Worker(w)->programs().size());
    if (most <= bound) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return most;
}

TEST_F(LimitsTest, CachedProgramsStayWithinTheirBoundAndEveryRequestIsServed) {
  max_cached_programs_ = 2;
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  // Three shapes cycled through a bound of two: every request misses, and
  // each install past the second evicts the least recently used plan.
  int requests = 0;
  for (int round = 0; round < 3; ++round) {
    for (int64_t rows : {2, 4, 6}) {
      InferRequest r = RowsRequest("m0", rows, static_cast<float>(10 * round + rows));
      ASSERT_OK_AND_ASSIGN(InferResponse out, coordinator_->Infer(r));
      ++requests;
      ASSERT_EQ(out.outputs.size(), 1u);
      EXPECT_EQ(out.outputs[0].tensor.shape, (std::vector<int64_t>{rows, 2}));
      EXPECT_EQ(out.outputs[0].tensor.bytes, r.inputs[0].bytes) << "rows " << rows << " round " << round;
      EXPECT_LE(MostInstalled(cluster_, workers_, 2), 2u) << "after request " << requests;
    }
  }
  const std::string metrics = coordinator_->metrics().registry.Exposition();
  EXPECT_THAT(metrics, HasSubstr("meshserve_program_cache_programs 2\n"));
  EXPECT_THAT(metrics, HasSubstr("meshserve_program_cache_evictions_total 7\n"));
  for (int64_t w : workers_) {
    // Nine installs; the seven evicted plans were uninstalled here (a program
    // lost to a late uninstall is installed once more: at least nine).
    EXPECT_GE(cluster_.Worker(w)->install_calls(), 9) << "worker " << w;
    EXPECT_GE(cluster_.Worker(w)->uninstalled().size(), 7u) << "worker " << w;
  }
  // A hit moves its plan to the front: 4 (the older) is kept, 2 evicted.
  ASSERT_OK(coordinator_->Infer(RowsRequest("m0", 4, 1)).status());
  ASSERT_OK(coordinator_->Infer(RowsRequest("m0", 2, 1)).status());
  EXPECT_THAT(coordinator_->metrics().registry.Exposition(),
              HasSubstr("meshserve_program_cache_evictions_total 8\n"));
  EXPECT_LE(MostInstalled(cluster_, workers_, 2), 2u);
}

// Four threads cycling through 3 shapes with a bound of 2: evictions,
// uninstalls and installs of the same program ids race; every answer is
// still right (a worker's NOT_FOUND "unknown program" is retried).
TEST_F(LimitsTest, ConcurrentRequestsOverTheBoundAreAllServed) {
  max_cached_programs_ = 2;
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 24; ++i) {
        InferRequest r = RowsRequest("m0", 2 * (1 + (i + t) % 3), static_cast<float>(t + i));
        absl::StatusOr<InferResponse> out = coordinator_->Infer(r);
        if (!out.ok() || out->outputs.size() != 1 || out->outputs[0].tensor.bytes != r.inputs[0].bytes) {
          ++wrong;
          ADD_FAILURE() << "thread " << t << " request " << i << ": " << out.status();
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_THAT(coordinator_->metrics().registry.Exposition(),
              ::testing::Not(HasSubstr("meshserve_program_cache_evictions_total 0\n")));
}

// A worker that lost the plan's program (an uninstall of the evicted plan of
// the same id arrived after it was installed again) answers NOT_FOUND
// "unknown program": the request is retried at once, installing it again.
TEST_F(LimitsTest, AProgramAWorkerLostIsInstalledAgain) {
  ASSERT_OK(Start(/*max_concurrent_pushes=*/2));
  InferRequest r = RowsRequest("m0", 4, 1);
  ASSERT_OK(coordinator_->Infer(r).status());
  const std::vector<std::string> programs = cluster_.Worker(workers_[1])->programs();
  ASSERT_EQ(programs.size(), 1u);
  ASSERT_OK(cluster_.Worker(workers_[1])->UninstallProgram(programs[0], absl::Seconds(1)));
  const int installs = cluster_.Worker(workers_[1])->install_calls();
  ASSERT_OK_AND_ASSIGN(InferResponse out, coordinator_->Infer(r));
  ASSERT_EQ(out.outputs.size(), 1u);
  EXPECT_EQ(out.outputs[0].tensor.bytes, r.inputs[0].bytes);
  EXPECT_EQ(cluster_.Worker(workers_[1])->install_calls(), installs + 1);
  EXPECT_EQ(cluster_.Worker(workers_[1])->programs(), programs);  // the same id
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[1]));
  // The same through InferAsync (its calls start from the cached plan).
  ASSERT_OK(cluster_.Worker(workers_[1])->UninstallProgram(programs[0], absl::Seconds(1)));
  absl::Notification answered;
  absl::StatusOr<InferResponse> async_out;
  coordinator_->InferAsync(r, [&](absl::StatusOr<InferResponse> result) {
    async_out = std::move(result);
    answered.Notify();
  });
  answered.WaitForNotification();
  ASSERT_OK(async_out.status());
  ASSERT_EQ(async_out->outputs.size(), 1u);
  EXPECT_EQ(async_out->outputs[0].tensor.bytes, r.inputs[0].bytes);
  EXPECT_EQ(cluster_.Worker(workers_[1])->install_calls(), installs + 2);
}

TEST_F(LimitsTest, CreateRejectsAProgramBoundBelowOne) {
  max_cached_programs_ = 0;
  EXPECT_THAT(Start(/*max_concurrent_pushes=*/2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "max_cached_programs must be >= 1, got 0"));
}

}  // namespace
}  // namespace meshserve
