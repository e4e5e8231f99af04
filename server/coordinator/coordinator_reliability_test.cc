// The coordinator's reliability rules over fake workers: the in-flight bound
// of an unbatched model, deadlines passed down as the time left, a request's
// own deadline versus a lost worker, and a call on a worker declared dead
// abandoned and retried at once instead of waiting for the stalled worker.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
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

class ReliabilityTest : public ::testing::Test {
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

TEST_F(ReliabilityTest, UnbatchedModelRejectsBeyondItsInflightBound) {
  Start(/*max_inflight=*/2);
  Client(workers_[0])->Hold(&release_);
  std::vector<std::thread> pool;
  std::atomic<int> ok{0};
  for (int t = 0; t < 2; ++t) {
    pool.emplace_back([&, t] {
      InferRequest r = Request("pair", 10 * t);
      absl::StatusOr<InferResponse> response = coordinator_->Infer(r);
      if (response.ok() && response->outputs[0].data == r.inputs[0].data) ++ok;
    });
  }
  // Both are admitted and held on worker 0.
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(Client(workers_[0])->deadlines_ms().size(), 2u);
  absl::Status over = coordinator_->Infer(Request("pair")).status();
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(std::string(over.message()),
              AllOf(HasSubstr("model 'pair'"), HasSubstr("2 requests in flight"),
                    HasSubstr("--max_inflight_per_model=2")));
  release_.Notify();
  for (auto& t : pool) t.join();
  EXPECT_EQ(ok, 2);
  // The slots are free again, and the bound is per model.
  EXPECT_OK(coordinator_->Infer(Request("pair")).status());
  EXPECT_OK(coordinator_->Infer(Request("other")).status());
}

TEST_F(ReliabilityTest, BoundIsPerModel) {
  Start(/*max_inflight=*/1);
  Client(workers_[0])->Hold(&release_);
  std::thread held([&] { EXPECT_OK(coordinator_->Infer(Request("pair")).status()); });
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_THAT(coordinator_->Infer(Request("pair")),
              StatusIs(absl::StatusCode::kResourceExhausted, "model 'pair'"));
  // "other" has its own bound: admitted, and held like "pair" is.
  std::thread other([&] { EXPECT_OK(coordinator_->Infer(Request("other")).status()); });
  for (int i = 0; i < 1000 && Client(workers_[0])->deadlines_ms().size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Client(workers_[0])->deadlines_ms().size(), 2u);
  release_.Notify();
  held.join();
  other.join();
}

TEST_F(ReliabilityTest, WorkersGetTheRequestsBudgetAndTheRetryOnlyWhatIsLeft) {
  Start();
  Client(workers_[1])->fake().FailExecute(absl::UnavailableError("connection reset"), 1);
  InferRequest r = Request("pair");
  r.timeout = absl::Seconds(20);
  ASSERT_OK_AND_ASSIGN(InferResponse response, coordinator_->Infer(r));
  EXPECT_EQ(response.outputs[0].data, r.inputs[0].data);
  const std::vector<int64_t> first = Client(workers_[0])->deadlines_ms();
  ASSERT_EQ(first.size(), 2u);  // the failed attempt and the retry
  EXPECT_LE(first[0], 20000);
  EXPECT_GT(first[0], 0);
  EXPECT_LT(first[1], first[0]);  // the retry waited (>= 20 ms) and gets only the rest
  // The RPC deadline is the request's plus a little: the worker's answer comes first.
  for (absl::Duration t : Client(workers_[0])->timeouts()) EXPECT_LE(t, absl::Seconds(21));
}

TEST_F(ReliabilityTest, RequestDeadlineIsDeadlineExceededWithoutBlamingTheWorker) {
  Start();
  Client(workers_[0])->Expire();
  InferRequest r = Request("pair");
  r.timeout = absl::Milliseconds(200);
  absl::Status s = coordinator_->Infer(r).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("failed request req"),
                                               HasSubstr("passed its deadline before step 0")));
  // Not a worker failure: no suspect, no retry.
  EXPECT_FALSE(coordinator_->registry().IsSuspect(workers_[0]));
  EXPECT_EQ(Client(workers_[0])->deadlines_ms().size(), 1u);
}

TEST_F(ReliabilityTest, CallOnAWorkerDeclaredDeadIsAbandonedAndRetriedAtOnce) {
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
  absl::StatusOr<InferResponse> response = coordinator_->Infer(r);  // default budget: 120 s
  stop.join();
  ASSERT_TRUE(silent);
  ASSERT_OK(response.status());
  EXPECT_EQ(response->outputs[0].data, r.inputs[0].data);
  EXPECT_GT(response->generation, before.generation);
  EXPECT_FALSE(coordinator_->registry().IsAlive(workers_[1]));
  // Answered while the stalled call is still held: it was given up, not awaited.
  EXPECT_EQ(Client(workers_[1])->finished(), 0);
  EXPECT_FALSE(Client(workers_[0])->fake().cancelled().empty());  // its peer was cancelled
}

}  // namespace
}  // namespace meshserve
