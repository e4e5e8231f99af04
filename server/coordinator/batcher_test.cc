#include "server/coordinator/batcher.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

// x: [-1, -1] float32 -> y, batched.
constexpr char kModel[] = R"({
  "name": "b", "mesh": {"data": -1}, "dtype": "float32",
  "inputs": {"x": {"shape": [-1, -1], "sharding": [null, null]}},
  "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"],
  "batching": {"max_batch_size": 8, "max_queue_delay_us": 200000, "max_queue_size": 16}
})";

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

InferRequest Request(const std::string& model, int rows, int cols, float base) {
  InferRequest r;
  r.model = model;
  r.id = absl::StrCat("r", base);
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.25f * i;
  r.inputs.push_back({"x", DType::kFloat32, {rows, cols}, FloatBytes(v)});
  return r;
}

// The "execution": y = 2x, row by row, recording each run's rows.
class BatcherTest : public ::testing::Test {
 protected:
  BatcherTest() {
    absl::StatusOr<ModelFile> m = ParseModelFile(kModel, "");
    EXPECT_TRUE(m.ok()) << m.status();
    model_ = std::make_shared<const ModelFile>(*std::move(m));
  }
  void Make(BatchingConfig config) {
    batcher_ = std::make_unique<Batcher>(config, [this](const InferRequest& r) {
      return Run(r);
    });
  }
  absl::StatusOr<InferResponse> Run(const InferRequest& r) {
    {
      absl::MutexLock lock(&mu_);
      runs_.push_back(r.inputs[0].shape[0]);
      ++executing_;
      peak_executing_ = std::max(peak_executing_, executing_);
      if (executing_ >= gate_) gate_open_ = true;  // stays open for the others
      // With a gate, a run waits (up to gate_wait_) until `gate_` runs are
      // executing.
      auto gate_reached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return gate_open_; };
      mu_.AwaitWithTimeout(absl::Condition(&gate_reached), gate_wait_);
      --executing_;
    }
    if (!fail_.ok()) return fail_;
    InferResponse out;
    out.model = r.model;
    out.id = r.id;
    InferOutput& y = out.outputs.emplace_back();
    y.tensor.name = "y";
    y.tensor.shape = r.inputs[0].shape;
    y.tensor.bytes = r.inputs[0].bytes;
    float* f = reinterpret_cast<float*>(y.tensor.bytes.data());
    for (size_t i = 0; i < y.tensor.bytes.size() / 4; ++i) f[i] *= 2;
    return out;
  }
  // Unbatched reference of `r`.
  std::string Expected(const InferRequest& r) {
    std::string d = r.inputs[0].bytes;
    float* f = reinterpret_cast<float*>(d.data());
    for (size_t i = 0; i < d.size() / 4; ++i) f[i] *= 2;
    return d;
  }
  absl::StatusOr<InferResponse> Infer(const InferRequest& r,
                                      absl::Duration timeout = absl::Seconds(10)) {
    absl::StatusOr<ValidatedRequest> v = ValidateInferRequest(model_, r);
    if (!v.ok()) return v.status();
    return batcher_->Infer(r, *v, timeout);
  }
  // Runs every request of `requests` on its own thread at once.
  std::vector<absl::StatusOr<InferResponse>> InferAll(const std::vector<InferRequest>& requests,
                                                      std::vector<absl::Duration> timeouts = {}) {
    std::vector<absl::StatusOr<InferResponse>> out(requests.size(),
                                                   absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] {
        out[i] = Infer(requests[i], i < timeouts.size() ? timeouts[i] : absl::Seconds(10));
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }
  std::vector<int64_t> Runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }

  std::shared_ptr<const ModelFile> model_;
  std::unique_ptr<Batcher> batcher_;
  absl::Mutex mu_;
  std::vector<int64_t> runs_ ABSL_GUARDED_BY(mu_);
  int64_t gate_ ABSL_GUARDED_BY(mu_) = 0;
  bool gate_open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration gate_wait_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int64_t executing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_executing_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_;
};

TEST_F(BatcherTest, ConcurrentRequestsRunAsOneBatchWithUnbatchedAnswers) {
  Make({/*max_batch_size=*/8, /*max_queue_delay_us=*/2000000, /*max_queue_size=*/16});
  std::vector<InferRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Request("b", i == 2 ? 3 : 1, 5, 10.0f * i));
  std::vector<absl::StatusOr<InferResponse>> got = InferAll(requests);  // 6 rows
  // The batch ran when the first request's delay ended (2 s) or earlier if
  // full; 6 rows < 8, so all four joined one batch.
  EXPECT_EQ(Runs(), (std::vector<int64_t>{6}));
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_OK(got[i].status());
    EXPECT_EQ(got[i]->id, requests[i].id);
    EXPECT_EQ(got[i]->batch_size, 6);
    ASSERT_EQ(got[i]->outputs.size(), 1u);
    EXPECT_EQ(got[i]->outputs[0].tensor.shape, requests[i].inputs[0].shape);
    EXPECT_EQ(got[i]->outputs[0].tensor.bytes, Expected(requests[i])) << i;
  }
}

TEST_F(BatcherTest, FullBatchRunsWithoutWaitingForTheDelay) {
  Make({4, 60000000, 16});  // a delay of one minute
  std::vector<InferRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Request("b", 1, 2, i));
  const absl::Time start = absl::Now();
  for (const auto& r : InferAll(requests)) ASSERT_OK(r.status());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(Runs(), (std::vector<int64_t>{4}));
}

// max_concurrent_batches: 2 full batches execute at the same time (each run
// waits until 2 are executing); with the default 1 they take turns (each run
// waits out the gate alone).
TEST_F(BatcherTest, ConcurrentBatchesUpToTheLimitExecuteAtOnce) {
  for (int64_t limit : {2, 1}) {
    BatchingConfig config{/*max_batch_size=*/2, /*max_queue_delay_us=*/60000000,
                          /*max_queue_size=*/16};
    config.max_concurrent_batches = limit;
    Make(config);
    {
      absl::MutexLock lock(&mu_);
      gate_ = 2;
      // Reached at once when 2 may run; waited out (short) when only 1 may.
      gate_wait_ = limit == 2 ? absl::Seconds(20) : absl::Milliseconds(300);
      peak_executing_ = 0;
      gate_open_ = false;
    }
    std::vector<InferRequest> requests;
    for (int i = 0; i < 4; ++i) requests.push_back(Request("b", 1, 2, i));
    std::vector<absl::StatusOr<InferResponse>> got = InferAll(requests);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_OK(got[i].status());
      EXPECT_EQ(got[i]->batch_size, 2);
      EXPECT_EQ(got[i]->outputs[0].tensor.bytes, Expected(requests[i])) << i;
    }
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(peak_executing_, limit) << "max_concurrent_batches " << limit;
  }
}

// A batch that waits for an execution slot gives the requests sent right
// after the executing batch ends (its closed-loop clients' next rows) one more
// delay to join: here the client of the first batch sends again 50 ms after
// it is answered (its round trip), and its request joins the batch that was
// waiting, which would otherwise have started when the slot freed.
TEST_F(BatcherTest, WaitingBatchTakesTheRowsSentWhenASlotFrees) {
  Make({/*max_batch_size=*/8, /*max_queue_delay_us=*/200000, /*max_queue_size=*/16});
  {
    absl::MutexLock lock(&mu_);
    gate_ = 100;  // never reached: each run takes gate_wait_
    gate_wait_ = absl::Milliseconds(1500);
  }
  const InferRequest a = Request("b", 1, 2, 1), b = Request("b", 1, 2, 2),
                     c = Request("b", 1, 2, 3);
  absl::StatusOr<InferResponse> got_a, got_b, got_c;
  std::thread client([&] {
    got_a = Infer(a);  // runs alone after its delay, for 1.5 s
    absl::SleepFor(absl::Milliseconds(50));
    got_c = Infer(c);
  });
  absl::SleepFor(absl::Milliseconds(700));  // a's batch is executing
  got_b = Infer(b);  // waits its delay, then for the slot, then takes c
  client.join();
  EXPECT_EQ(Runs(), (std::vector<int64_t>{1, 2}));
  ASSERT_OK(got_a.status());
  ASSERT_OK(got_b.status());
  ASSERT_OK(got_c.status());
  EXPECT_EQ(got_a->batch_size, 1);
  EXPECT_EQ(got_b->batch_size, 2);
  EXPECT_EQ(got_c->batch_size, 2);
  EXPECT_EQ(got_b->outputs[0].tensor.bytes, Expected(b));
  EXPECT_EQ(got_c->outputs[0].tensor.bytes, Expected(c));
}

TEST_F(BatcherTest, MixedShapesBatchSeparately) {
  Make({8, 300000, 16});
  std::vector<InferRequest> requests = {Request("b", 1, 4, 1), Request("b", 2, 3, 2),
                                        Request("b", 1, 4, 3), Request("b", 1, 3, 4),
                                        Request("b", 9, 4, 5)};  // 9 rows > 8: alone
  std::vector<absl::StatusOr<InferResponse>> got = InferAll(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_OK(got[i].status());
    EXPECT_EQ(got[i]->outputs[0].tensor.bytes, Expected(requests[i])) << i;
  }
  std::vector<int64_t> runs = Runs();
  std::sort(runs.begin(), runs.end());
  EXPECT_EQ(runs, (std::vector<int64_t>{2, 3, 9}));  // [*,4]: 1+1, [*,3]: 2+1, alone
  EXPECT_EQ(got[0]->batch_size, 2);
  EXPECT_EQ(got[1]->batch_size, 3);
  EXPECT_EQ(got[4]->batch_size, 9);
}

TEST_F(BatcherTest, BadRequestFailsAloneBeforeBatching) {
  Make({8, 300000, 16});
  std::vector<InferRequest> requests = {Request("b", 1, 4, 1), Request("b", 1, 4, 2),
                                        Request("b", 1, 4, 3)};
  requests[1].inputs[0].dtype = DType::kInt32;  // bad dtype
  requests[2].inputs[0].bytes.pop_back();        // bad byte count
  std::vector<absl::StatusOr<InferResponse>> got = InferAll(requests);
  ASSERT_OK(got[0].status());
  EXPECT_EQ(got[0]->outputs[0].tensor.bytes, Expected(requests[0]));
  EXPECT_THAT(got[1].status(), StatusIs(absl::StatusCode::kInvalidArgument, "dtype"));
  EXPECT_THAT(got[2].status(), StatusIs(absl::StatusCode::kInvalidArgument, "bytes"));
  EXPECT_EQ(Runs(), (std::vector<int64_t>{1}));
}

TEST_F(BatcherTest, DeadlineThatPassesInTheQueueFailsOnlyThatRequestWithoutRunning) {
  Make({8, 300000, 16});  // 300 ms delay
  std::vector<InferRequest> requests = {Request("b", 1, 4, 1), Request("b", 2, 4, 2),
                                        Request("b", 1, 4, 3)};
  std::vector<absl::StatusOr<InferResponse>> got =
      InferAll(requests, {absl::Seconds(10), absl::Milliseconds(1), absl::Seconds(10)});
  ASSERT_OK(got[0].status());
  ASSERT_OK(got[2].status());
  EXPECT_EQ(got[0]->outputs[0].tensor.bytes, Expected(requests[0]));
  EXPECT_EQ(got[2]->outputs[0].tensor.bytes, Expected(requests[2]));
  EXPECT_THAT(got[1].status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "queued for batching"));
  EXPECT_EQ(Runs(), (std::vector<int64_t>{2}));  // without the expired request's 2 rows
}

TEST_F(BatcherTest, BoundedQueueRejectsTheOverflow) {
  Make({8, 300000, 2});
  std::vector<InferRequest> requests = {Request("b", 1, 4, 1), Request("b", 1, 4, 2),
                                        Request("b", 1, 4, 3)};
  std::vector<absl::StatusOr<InferResponse>> got = InferAll(requests);
  int exhausted = 0;
  for (const auto& r : got) {
    if (absl::IsResourceExhausted(r.status())) {
      ++exhausted;
    } else {
      ASSERT_OK(r.status());
    }
  }
  EXPECT_EQ(exhausted, 1);
  // Once the batch is done the queue is empty again.
  ASSERT_OK(Infer(requests[0]).status());
}

TEST_F(BatcherTest, ExecutionFailureIsTheBatchsError) {
  Make({8, 100000, 16});
  fail_ = absl::UnavailableError("worker 1 down");
  for (const auto& r : InferAll({Request("b", 1, 4, 1), Request("b", 1, 4, 2)})) {
    EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  }
}

// The coordinator with fake workers (the identity model of
// fake_model_compiler.h): batched answers equal the inputs, as unbatched.
TEST(BatchingCoordinatorTest, BatchedModelAnswersEqualUnbatched) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/batcher_models_", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/b.json") << kModel;
  CoordinatorOptions options;
  options.model_dir = dir;
  options.run_control_thread = false;
  FakeCluster cluster;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Coordinator> coordinator,
                       Coordinator::Create(options, cluster.Factory(),
                                           std::make_unique<FakeModelCompiler>()));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(coordinator->RegisterWorker(absl::StrCat("127.0.0.1:", 9100 + i), 2, 1 << 30, -1)
                  .status());
  }
  coordinator->Tick();
  std::vector<InferRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(Request("b", 1 + i % 2, 4, 7.0f * i));
  requests.push_back(Request("b", 1, 4, 99));
  requests.back().inputs[0].shape = {1, 4, 1};  // bad rank: fails alone
  std::vector<absl::StatusOr<InferResponse>> got(requests.size(), absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = coordinator->Infer(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  int64_t largest = 0;
  for (size_t i = 0; i + 1 < requests.size(); ++i) {
    ASSERT_OK(got[i].status());
    ASSERT_EQ(got[i]->outputs.size(), 1u);
    EXPECT_EQ(got[i]->outputs[0].tensor.shape, requests[i].inputs[0].shape);
    EXPECT_EQ(got[i]->outputs[0].tensor.bytes, requests[i].inputs[0].bytes) << i;
    largest = std::max(largest, got[i]->batch_size);
  }
  EXPECT_GT(largest, 1);
  EXPECT_THAT(got.back().status(), StatusIs(absl::StatusCode::kInvalidArgument, "rank"));
  // Each answered request records compute time once (its batch's), as an
  // unbatched one does; the rejected one records none.
  EXPECT_EQ(coordinator->metrics().compute_seconds.Count({"b"}),
            static_cast<int64_t>(requests.size()) - 1);
  EXPECT_EQ(coordinator->metrics().batch_size.Count({"b"}),
            static_cast<int64_t>(requests.size()) - 1);
}

// Requests whose ids the coordinator converted (INT64 for an int32 input)
// are concatenated only with requests that sent the same dtype.
TEST(BatchRowsTest, ConvertedInputsHaveTheirOwnBatchKey) {
  auto model = std::make_shared<ModelFile>();
  model->name = "ids";
  model->inputs.push_back({"ids", {-1, 3}, PartitionSpec(), DType::kInt32});
  LayerDef y;
  y.name = "y";
  y.kind = ModelOp::kRelu;
  y.inputs = {"ids"};
  model->layers.push_back(y);
  model->outputs = {"y"};
  InferRequest as32, as64;
  as32.inputs.push_back({"ids", DType::kInt32, {2, 3}, std::string(6 * 4, '\0')});
  as64.inputs.push_back({"ids", DType::kInt64, {2, 3}, std::string(6 * 8, '\0')});
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v32, ValidateInferRequest(model, as32));
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v64, ValidateInferRequest(model, as64));
  std::string k32, k64;
  EXPECT_EQ(batcher_internal::BatchRows(v32, &k32), 2);
  EXPECT_EQ(batcher_internal::BatchRows(v64, &k64), 2);
  EXPECT_NE(k32, k64);
}

}  // namespace
}  // namespace meshserve
