// The coordinator's reliability rules over fake workers: the in-flight bound
// of an unbatched model, deadlines passed down as the time left, a request's
// own deadline versus a lost worker, and a call on a worker declared dead
// abandoned and retried at once instead of waiting for the stalled worker.
// Each rule is checked through Infer and through InferAsync (the gRPC
// ModelInfer's path), whose requests wait for their workers without a thread
// until a call fails or runs long. Which failures are retried, how often,
// and a run cancelled by a failed peer (ABORTED) retried (the fault schedule,
// tests/integration/test_fault_schedule.py).
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/infer_pipeline.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Two devices, one per worker while both live; both on one worker otherwise.
constexpr char kPair[] = R"({
  "name": "pair", "mesh": {"data": 2}, "dtype": "float32",
  "inputs": {"x": {"shape": [4, 2], "sharding": ["data", null]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";
constexpr char kOther[] = R"({
  "name": "other", "mesh": {"data": 2}, "dtype": "float32",
  "inputs": {"x": {"shape": [4, 2], "sharding": [null, null]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

// Forwards to a FakeWorkerClient, records each Execute's deadline_ms and
// timeout, and can hold Executes (a stalled worker) or answer them with the
// worker's own DEADLINE_EXCEEDED once deadline_ms has passed.
class RecordingClient : public WorkerClient {
 public:
  explicit RecordingClient(std::shared_ptr<FakeWorkerClient> fake) : fake_(std::move(fake)) {}
  absl::StatusOr<LoadModelResultIr> LoadModel(const LoadModelIr& call,
                                              absl::Duration t) override {
    return fake_->LoadModel(call, t);
  }
  absl::Status UnloadModel(const std::string& m, int64_t g, int64_t v,
                           absl::Duration t) override {
    return fake_->UnloadModel(m, g, v, t);
  }
  absl::StatusOr<std::string> ReadParam(const ReadParamIr& call, absl::Duration t) override {
    return fake_->ReadParam(call, t);
  }
  absl::StatusOr<std::unique_ptr<StageParamsWriter>> StageParams(absl::Duration t) override {
    return fake_->StageParams(t);
  }
  absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& call,
                                              absl::Duration t) override {
    return fake_->CommitParams(call, t);
  }
  absl::Status AbortParams(const std::string& m, int64_t g, int64_t v,
                           absl::Duration t) override {
    return fake_->AbortParams(m, g, v, t);
  }
  absl::Status InstallProgram(const ProgramIr& p, absl::Duration t) override {
    return fake_->InstallProgram(p, t);
  }
  absl::StatusOr<ExecuteResult> Execute(ExecuteCall call, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      deadlines_ms_.push_back(call.deadline_ms);
      timeouts_.push_back(timeout);
    }
    if (absl::Notification* hold = hold_.load(); hold != nullptr) hold->WaitForNotification();
    if (expire_) {
      absl::SleepFor(absl::Milliseconds(call.deadline_ms));
      return absl::DeadlineExceededError(
          absl::StrCat("request '", call.request_id, "' passed its deadline before step 0"));
    }
    absl::StatusOr<ExecuteResult> result = fake_->Execute(std::move(call), timeout);
    ++finished_;
    return result;
  }
  absl::Status Cancel(const std::string& id, const std::string& why, absl::Duration t) override {
    return fake_->Cancel(id, why, t);
  }
  absl::StatusOr<WorkerStatusIr> Status(absl::Duration t) override { return fake_->Status(t); }

  void Hold(absl::Notification* hold) { hold_ = hold; }  // before requests start
  void Reset() {
    absl::MutexLock lock(&mu_);
    deadlines_ms_.clear();
    timeouts_.clear();
    finished_ = 0;
  }
  void Expire() { expire_ = true; }
  std::vector<int64_t> deadlines_ms() const {
    absl::MutexLock lock(&mu_);
    return deadlines_ms_;
  }
  std::vector<absl::Duration> timeouts() const {
    absl::MutexLock lock(&mu_);
    return timeouts_;
  }
  int finished() const { return finished_; }
  FakeWorkerClient& fake() { return *fake_; }

 private:
  const std::shared_ptr<FakeWorkerClient> fake_;
  std::atomic<absl::Notification*> hold_{nullptr};
  std::atomic<bool> expire_{false};
  std::atomic<int> finished_{0};
  mutable absl::Mutex mu_;
  std::vector<int64_t> deadlines_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> timeouts_ ABSL_GUARDED_BY(mu_);
};

// The parameter: requests go through InferAsync (true) or Infer (false).
class ReliabilityTest : public ::testing::TestWithParam<bool> {
 protected:
  void Start(int max_inflight = 64) {
    const std::string dir = absl::StrCat(::testing::TempDir(), "/reliability_", getpid(), "_",
                                         ::testing::UnitTest::GetInstance()->random_seed(),
                                         "_", counter_++);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/pair.json") << kPair;
    std::ofstream(dir + "/other.json") << kOther;
    CoordinatorOptions options;
    options.model_dir = dir;
    options.heartbeat_interval = absl::Milliseconds(50);
    options.retry_wait = absl::Seconds(10);
    options.placement_retry_backoff = absl::Milliseconds(10);
    options.max_inflight_per_model = max_inflight;
    WorkerClientFactory factory = [this](int64_t id, const std::string&)
        -> absl::StatusOr<std::shared_ptr<WorkerClient>> { return Client(id); };
    ASSERT_OK_AND_ASSIGN(coordinator_, Coordinator::Create(options, factory,
                                                           std::make_unique<FakeModelCompiler>()));
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK_AND_ASSIGN(int64_t id, coordinator_->RegisterWorker(
                                           absl::StrCat("127.0.0.1:", 9100 + i), 2, 1 << 30, -1));
      workers_.push_back(id);
    }
    Beat(workers_);
    for (int i = 0; i < 1000 && !coordinator_->IsReady(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(coordinator_->IsReady());
    if (GetParam()) {
      // InferAsync starts only requests whose plan is compiled: compile
      // pair's (not other's) and forget the calls that did it.
      ASSERT_OK(coordinator_->Infer(Request("pair")).status());
      for (int64_t id : workers_) Client(id)->Reset();
    }
  }
  // A request through the path under test.
  absl::StatusOr<InferResponse> Run(const InferRequest& r) {
    if (!GetParam()) return coordinator_->Infer(r);
    absl::Notification answered;
    std::atomic<int> calls{0};
    absl::StatusOr<InferResponse> result;
    coordinator_->InferAsync(r, [&](absl::StatusOr<InferResponse> response) {
      result = std::move(response);
      ++calls;
      answered.Notify();
    });
    answered.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(1));
    EXPECT_EQ(calls, 1);  // exactly once
    return result;
  }
  // InferAsync's requests so far by how they waited ("callback", "thread").
  double Waited(const std::string& path) {
    return coordinator_->metrics().async_paths.Value({path});
  }
  std::shared_ptr<RecordingClient> Client(int64_t id) {
    absl::MutexLock lock(&mu_);
    auto& client = clients_[id];
    if (client == nullptr) client = std::make_shared<RecordingClient>(cluster_.Worker(id));
    return client;
  }
  // Heartbeats `ids` every 10 ms from now on (the others go silent).
  void Beat(std::vector<int64_t> ids) {
    {
      absl::MutexLock lock(&mu_);
      beating_ = std::move(ids);
    }
    if (beats_.joinable()) return;
    beats_ = std::thread([this] {
      while (!stop_) {
        std::vector<int64_t> ids;
        {
          absl::MutexLock lock(&mu_);
          ids = beating_;
        }
        for (int64_t id : ids) coordinator_->Heartbeat(id, false);
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    stop_ = true;
    if (beats_.joinable()) beats_.join();
  }
  static InferRequest Request(const std::string& model, float offset = 0) {
    InferRequest r;
    r.model = model;
    r.id = "rel";
    std::vector<float> v(8);
    for (int i = 0; i < 8; ++i) v[i] = offset + i;
    r.inputs.push_back({"x", DType::kFloat32, {4, 2},
                        std::string(reinterpret_cast<const char*>(v.data()), 32)});
    return r;
  }

  static inline std::atomic<int> counter_{0};
  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<int64_t> workers_;
  absl::Notification release_;  // frees held Executes
  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<RecordingClient>> clients_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> beating_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread beats_;
};

TEST_P(ReliabilityTest, UnbatchedModelRejectsBeyondItsInflightBound) {
  Start(/*max_inflight=*/2);
  Client(workers_[0])->Hold(&release_);
  std::vector<std::thread> pool;
  std::atomic<int> ok{0};
  for (int t = 0; t < 2; ++t) {
    pool.emplace_back([&, t] {
      InferRequest r = Request("pair", 10 * t);
      absl::StatusOr<InferResponse> response = Run(r);
      if (response.ok() && response->outputs[0].tensor.bytes == r.inputs[0].bytes) ++ok;
    });
  }
  // Both are admitted and held on worker 0.
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(Client(workers_[0])->deadlines_ms().size(), 2u);
  absl::Status over = Run(Request("pair")).status();
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(std::string(over.message()),
              AllOf(HasSubstr("model 'pair'"), HasSubstr("2 requests in flight"),
                    HasSubstr("--max_inflight_per_model=2")));
  release_.Notify();
  for (auto& t : pool) t.join();
  EXPECT_EQ(ok, 2);
  // The slots are free again, and the bound is per model.
  EXPECT_OK(Run(Request("pair")).status());
  EXPECT_OK(Run(Request("other")).status());
}

TEST_P(ReliabilityTest, BoundIsPerModel) {
  Start(/*max_inflight=*/1);
  Client(workers_[0])->Hold(&release_);
  std::thread held([&] { EXPECT_OK(Run(Request("pair")).status()); });
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_THAT(Run(Request("pair")),
              StatusIs(absl::StatusCode::kResourceExhausted, "model 'pair'"));
  // "other" has its own bound: admitted, and held like "pair" is.
  std::thread other([&] { EXPECT_OK(Run(Request("other")).status()); });
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Client(workers_[0])->deadlines_ms().size(), 2u);
  release_.Notify();
  held.join();
  other.join();
}

TEST_P(ReliabilityTest, WorkersGetTheRequestsBudgetAndTheRetryOnlyWhatIsLeft) {
  Start();
  Client(workers_[1])->fake().FailExecute(absl::UnavailableError("connection reset"), 1);
  InferRequest r = Request("pair");
  r.timeout = absl::Seconds(20);
  ASSERT_OK_AND_ASSIGN(InferResponse response, Run(r));
  EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes);
  const std::vector<int64_t> first = Client(workers_[0])->deadlines_ms();
  ASSERT_EQ(first.size(), 2u);  // the failed attempt and the retry
  EXPECT_LE(first[0], 20000);
  EXPECT_GT(first[0], 0);
  EXPECT_LT(first[1], first[0]);  // the retry waited (>= 20 ms) and gets only the rest
  // The RPC deadline is the request's plus a little: the worker's answer comes first.
  for (absl::Duration t : Client(workers_[0])->timeouts()) EXPECT_LE(t, absl::Seconds(21));
  if (GetParam()) {  // the failed call sent the request to a thread
    EXPECT_EQ(Waited("thread"), 1);
    EXPECT_EQ(Waited("callback"), 0);
  }
}

TEST_P(ReliabilityTest, RequestDeadlineIsDeadlineExceededWithoutBlamingTheWorker) {
  Start();
  Client(workers_[0])->Expire();
  InferRequest r = Request("pair");
  r.timeout = absl::Milliseconds(200);
  absl::Status s = Run(r).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("failed request req"),
                                               HasSubstr("passed its deadline before step 0")));
  // Not a worker failure: no suspect, no retry.
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[0]));
  EXPECT_EQ(Client(workers_[0])->deadlines_ms().size(), 1u);
  if (GetParam()) {
    EXPECT_EQ(Waited("thread"), 1);
  }
}

TEST_P(ReliabilityTest, CallOnAWorkerDeclaredDeadIsAbandonedAndRetriedAtOnce) {
  Start();
  ASSERT_OK_AND_ASSIGN(ModelStatus before, coordinator_->GetModelStatus("pair"));
  Client(workers_[1])->Hold(&release_);  // stalled (SIGSTOP): never answers
  std::atomic<bool> silent{false};
  std::thread stop([&] {
    for (int i = 0; i < 1000 && Client(workers_[1])->deadlines_ms().empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    Beat({workers_[0]});  // its heartbeats stop too
    silent = true;
  });
  InferRequest r = Request("pair", 3);
  absl::StatusOr<InferResponse> response = Run(r);  // default budget: 120 s
  stop.join();
  ASSERT_TRUE(silent);
  ASSERT_OK(response.status());
  EXPECT_EQ(response->outputs[0].tensor.bytes, r.inputs[0].bytes);
  EXPECT_GT(response->generation, before.generation);
  EXPECT_FALSE(coordinator_->registry().IsAlive(workers_[1]));
  // Answered while the stalled call is still held: it was given up, not awaited.
  EXPECT_EQ(Client(workers_[1])->finished(), 0);
  EXPECT_FALSE(Client(workers_[0])->fake().cancelled().empty());  // its peer was cancelled
  if (GetParam()) {
    EXPECT_EQ(Waited("thread"), 1);  // the watch handed it to a thread
  }
}

TEST_P(ReliabilityTest, CompiledPlansAnswerWithoutAThreadAndOthersOnOne) {
  Start();
  // The fake workers answer each output slice with its input slice: the
  // answer is x, assembled from both workers' slices.
  for (const char* model : {"pair", "other", "other"}) {
    InferRequest r = Request(model, -4.5f);
    ASSERT_OK_AND_ASSIGN(InferResponse response, Run(r));
    ASSERT_EQ(response.outputs.size(), 1u);
    EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes) << model;
  }
  if (GetParam()) {
    // pair's plan was compiled (Start), other's by its first request, which
    // ran on a thread; the second found it.
    EXPECT_EQ(Waited("callback"), 2);
    EXPECT_EQ(Waited("thread"), 1);
  } else {
    EXPECT_EQ(Waited("callback") + Waited("thread"), 0);
  }
  // Errors before the calls are answered too, as Infer answers them.
  InferRequest bad = Request("pair");
  bad.inputs[0].shape = {2, 4};
  EXPECT_THAT(Run(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Run(Request("nope")), StatusIs(absl::StatusCode::kNotFound, "'nope'"));
}

// A worker whose send to a failed peer (or whose peer's Cancel) cancelled
// its run answers ABORTED; when that answer reaches the coordinator first,
// the request is retried, not failed (fault schedule: ABORTED around kills).
TEST_P(ReliabilityTest, RunCancelledByAFailedPeerIsRetried) {
  Start();
  Client(workers_[0])->fake().FailExecute(
      absl::AbortedError("request 'req7' cancelled: send of tag 'y/0' to worker 1: "
                         "Connection reset by peer"),
      1);
  InferRequest r = Request("pair", 2);
  ASSERT_OK_AND_ASSIGN(InferResponse response, Run(r));
  EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes);
  EXPECT_EQ(Client(workers_[0])->deadlines_ms().size(), 2u);  // failed once, then retried
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[0]));  // ABORTED blames no one
}

// A transient failure that comes back on the retry (a worker failing twice
// in a row, a placement that moves twice) is retried again within the
// request's deadline: before, the second failure was final.
TEST_P(ReliabilityTest, RetriesMoreThanOnceWithinTheDeadline) {
  Start();
  Client(workers_[1])->fake().FailExecute(absl::UnavailableError("connection reset"), 3);
  InferRequest r = Request("pair", 5);
  r.timeout = absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(InferResponse response, Run(r));
  EXPECT_EQ(response.outputs[0].tensor.bytes, r.inputs[0].bytes);
  EXPECT_EQ(Client(workers_[1])->deadlines_ms().size(), 4u);  // 3 failures, then the answer
  EXPECT_TRUE(coordinator_->registry().IsAlive(workers_[1]));
}

// ...but a worker failing every time ends at the attempts' bound with its
// UNAVAILABLE, and the request's own errors are not retried at all.
TEST_P(ReliabilityTest, BoundedAttemptsAndOwnErrorsNotRetried) {
  Start();
  Client(workers_[1])->fake().FailExecute(absl::UnavailableError("connection reset"), -1);
  InferRequest r = Request("pair");
  r.timeout = absl::Seconds(60);
  EXPECT_THAT(Run(r), StatusIs(absl::StatusCode::kUnavailable, "connection reset"));
  EXPECT_EQ(Client(workers_[1])->deadlines_ms().size(), 8u);  // kMaxAttempts
  Client(workers_[1])->fake().FailExecute(absl::OkStatus());
  for (int i = 0; i < 1000 && coordinator_->registry().IsSuspect(workers_[1]); ++i) {
    absl::SleepFor(absl::Milliseconds(5));  // the control loop's probe clears it
  }
  Client(workers_[1])->Reset();
  Client(workers_[0])->fake().FailExecute(absl::InvalidArgumentError("step 0: bad slice"), 1);
  EXPECT_THAT(Run(Request("pair")), StatusIs(absl::StatusCode::kInvalidArgument, "bad slice"));
  EXPECT_EQ(Client(workers_[1])->deadlines_ms().size(), 1u);  // one attempt
}

TEST(RetriableFailureTest, WhichFailuresAreRetried) {
  for (bool moved : {false, true}) {
    EXPECT_TRUE(RetriableFailure(absl::UnavailableError("worker 1 failed"), moved));
    EXPECT_TRUE(RetriableFailure(absl::AbortedError("request 'r' cancelled"), moved));
    EXPECT_EQ(RetriableFailure(absl::NotFoundError("generation 3 not resident"), moved), moved);
    EXPECT_EQ(RetriableFailure(absl::FailedPreconditionError("version 2 unloaded"), moved),
              moved);
    EXPECT_EQ(RetriableFailure(absl::CancelledError("unloaded"), moved), moved);
    EXPECT_FALSE(RetriableFailure(absl::InvalidArgumentError("bad input"), moved));
    EXPECT_FALSE(RetriableFailure(absl::ResourceExhaustedError("limit"), moved));
    EXPECT_FALSE(RetriableFailure(absl::DeadlineExceededError("its deadline"), moved));
    EXPECT_FALSE(RetriableFailure(absl::OutOfRangeError("index"), moved));
    EXPECT_FALSE(RetriableFailure(absl::InternalError("bug"), moved));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ReliabilityTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "InferAsync" : "Infer";
                         });

}  // namespace
}  // namespace meshserve
