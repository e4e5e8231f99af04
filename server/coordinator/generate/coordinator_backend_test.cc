// CoordinatorGenerationBackend's step executor over a real Coordinator on
// fake workers (server/coordinator/testing/): what reaches the workers for a
// step of releases only (ReleaseSequences, no program) and for a step that
// forks caches (DecodeStep.forks on the first batch).
#include "server/coordinator/generate/coordinator_backend.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// The smallest LM that generates (decode_model.h InspectLm): token table
// [16, 4] tied as the head, one attention layer of 2 heads of head_dim 2 on
// the model axis, a context of 12 positions.
constexpr char kTinyLm[] = R"({
  "name": "tiny_lm", "mesh": {"model": 2}, "generation": {"context_length": 12},
  "inputs": {"ids": {"shape": [-1, -1], "dtype": "int32"}},
  "params": {"emb": {"shape": [16, 4]},
    "q_w": {"shape": [4, 4], "sharding": [null, "model"]},
    "k_w": {"shape": [4, 4], "sharding": [null, "model"]},
    "v_w": {"shape": [4, 4], "sharding": [null, "model"]}},
  "layers": [{"name": "x", "op": "embed", "input": "ids", "table": "emb"},
    {"name": "q", "op": "einsum", "inputs": ["x", "q_w"],
     "equation": "bsd,de->bse"},
    {"name": "k", "op": "einsum", "inputs": ["x", "k_w"],
     "equation": "bsd,de->bse"},
    {"name": "v", "op": "einsum", "inputs": ["x", "v_w"],
     "equation": "bsd,de->bse"},
    {"name": "q4", "op": "reshape", "input": "q", "shape": [0, 0, 2, 2]},
    {"name": "k4", "op": "reshape", "input": "k", "shape": [0, 0, 2, 2]},
    {"name": "v4", "op": "reshape", "input": "v", "shape": [0, 0, 2, 2]},
    {"name": "a", "op": "attention", "inputs": ["q4", "k4", "v4"], "scale": 0.7},
    {"name": "a3", "op": "reshape", "input": "a", "shape": [0, 0, 4],
     "out_sharding": [null, null, null]},
    {"name": "out", "op": "einsum", "auto_axes": true, "out_sharding": [null, null, null],
     "equation": "bsd,vd->bsv", "inputs": ["a3", "emb"]}],
  "outputs": ["out"]
})";

class CoordinatorBackendTest : public ::testing::Test {
 protected:
  // A coordinator serving tiny_lm on 2 fake workers (one device each).
  void SetUp() override {
    static std::atomic<int> counter{0};
    const std::string dir = absl::StrCat(::testing::TempDir(), "/backend_models_", getpid(),
                                         "_", counter++);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/tiny_lm.json") << kTinyLm;
    CoordinatorOptions options;
    options.model_dir = dir;
    options.run_control_thread = false;
    ASSERT_OK_AND_ASSIGN(coordinator_, Coordinator::Create(options, cluster_.Factory(),
                                                           std::make_unique<FakeModelCompiler>()));
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(coordinator_
                    ->RegisterWorker(absl::StrCat("127.0.0.1:", 9100 + i), 1, int64_t{1} << 30, -1)
                    .status());
    }
    coordinator_->Tick();
    ASSERT_OK_AND_ASSIGN(ModelStatus status, coordinator_->GetModelStatus("tiny_lm"));
    ASSERT_NE(status.placement, nullptr) << status.state;
    placement_ = status.placement;
    ASSERT_THAT(placement_->worker_addresses, SizeIs(2));
  }

  std::unique_ptr<StepExecutor> Executor(CoordinatorBackendOptions options) {
    backend_ = std::make_unique<CoordinatorGenerationBackend>(coordinator_.get(), options);
    absl::StatusOr<std::unique_ptr<StepExecutor>> executor = backend_->NewExecutor("tiny_lm");
    EXPECT_OK(executor.status());
    if (!executor.ok()) return nullptr;
    EXPECT_GT((*executor)->NumBlocks(), 0);
    return *std::move(executor);
  }

  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<const Placement> placement_;
  std::unique_ptr<CoordinatorGenerationBackend> backend_;
};

// The last sequences ended: their caches are freed with one ReleaseSequences
// per worker of the placement, and no program runs.
TEST_F(CoordinatorBackendTest, AReleaseOnlyStepSendsReleaseSequencesAndRunsNoProgram) {
  std::unique_ptr<StepExecutor> executor = Executor(CoordinatorBackendOptions{});
  ASSERT_NE(executor, nullptr);
  StepPlan plan;
  plan.step = 7;
  plan.release = {3, 5};
  ASSERT_TRUE(plan.release_only());
  ASSERT_OK_AND_ASSIGN(std::vector<SampledToken> tokens, executor->RunStep(plan));
  EXPECT_THAT(tokens, IsEmpty());
  for (const auto& [worker_id, address] : placement_->worker_addresses) {
    std::shared_ptr<FakeWorkerClient> worker = cluster_.Worker(worker_id);
    EXPECT_EQ(worker->execute_calls(), 0) << "worker " << worker_id;
    EXPECT_THAT(worker->programs(), IsEmpty()) << "worker " << worker_id;
    std::vector<FakeWorkerClient::ReleaseCall> released = worker->released();
    ASSERT_THAT(released, SizeIs(1)) << "worker " << worker_id;
    EXPECT_EQ(released[0].model, "tiny_lm");
    EXPECT_EQ(released[0].generation, placement_->generation);
    EXPECT_THAT(released[0].seqs, ElementsAre(3, 5));
  }
}

// A worker that cannot be reached fails the step; its releases go again with
// the next one (with the next step's own).
TEST_F(CoordinatorBackendTest, FailedReleasesAreSentAgain) {
  std::unique_ptr<StepExecutor> executor = Executor(CoordinatorBackendOptions{});
  ASSERT_NE(executor, nullptr);
  const int64_t down = placement_->worker_addresses.begin()->first;
  cluster_.Worker(down)->SetDown(true);
  StepPlan plan;
  plan.step = 1;
  plan.release = {4};
  EXPECT_THAT(executor->RunStep(plan).status(),
              testing::StatusIs(absl::StatusCode::kUnavailable));
  cluster_.Worker(down)->SetDown(false);
  plan.step = 2;
  plan.release = {6};
  ASSERT_OK(executor->RunStep(plan).status());
  std::vector<FakeWorkerClient::ReleaseCall> released = cluster_.Worker(down)->released();
  ASSERT_THAT(released, SizeIs(1));
  EXPECT_THAT(released[0].seqs, ElementsAre(4, 6));
}

// Workers without ReleaseSequences (UNIMPLEMENTED): the releases ride a
// decode step with no span.
TEST_F(CoordinatorBackendTest, WithoutReleaseSequencesAReleaseOnlyStepRunsAPaddingStep) {
  for (const auto& [worker_id, address] : placement_->worker_addresses) {
    cluster_.Worker(worker_id)->SetReleaseUnimplemented(true);
  }
  std::unique_ptr<StepExecutor> executor = Executor(CoordinatorBackendOptions{});
  ASSERT_NE(executor, nullptr);
  StepPlan plan;
  plan.step = 2;
  plan.release = {9};
  // The fake workers do not sample, so the step itself fails after they ran it.
  executor->RunStep(plan).status().IgnoreError();
  for (const auto& [worker_id, address] : placement_->worker_addresses) {
    std::shared_ptr<FakeWorkerClient> worker = cluster_.Worker(worker_id);
    EXPECT_THAT(worker->released(), IsEmpty());
    std::vector<DecodeStepIr> steps = worker->decode_steps();
    ASSERT_THAT(steps, SizeIs(1)) << "worker " << worker_id;
    EXPECT_THAT(steps[0].spans, IsEmpty());
    EXPECT_THAT(steps[0].release, ElementsAre(9));
  }
}

// n choices sharing a prefill: the executor can fork, and the plan's forks
// reach every worker on the first batch's decode step, with its releases.
TEST_F(CoordinatorBackendTest, ForksRideTheFirstBatchToEveryWorker) {
  std::unique_ptr<StepExecutor> executor = Executor(CoordinatorBackendOptions{});
  ASSERT_NE(executor, nullptr);
  EXPECT_TRUE(executor->CanFork());
  StepPlan plan;
  plan.step = 4;
  plan.forks = {{1, {2, 3}, 5}};
  plan.release = {8};
  StepBatch batch;
  batch.version = placement_->version;
  for (SequenceId seq : {1, 2, 3}) {
    StepSpan span;
    span.seq = seq;
    span.past_len = 5;
    span.token_ids = {11};
    span.sample = true;
    span.sampling.seed = static_cast<uint64_t>(seq);
    batch.spans.push_back(span);
  }
  batch.num_tokens = 3;
  plan.batches.push_back(batch);
  // The fake workers do not sample, so the step itself fails after they ran it.
  executor->RunStep(plan).status().IgnoreError();
  for (const auto& [worker_id, address] : placement_->worker_addresses) {
    std::vector<DecodeStepIr> steps = cluster_.Worker(worker_id)->decode_steps();
    ASSERT_THAT(steps, SizeIs(1)) << "worker " << worker_id;
    ASSERT_THAT(steps[0].forks, SizeIs(1));
    EXPECT_EQ(steps[0].forks[0].src, 1);
    EXPECT_THAT(steps[0].forks[0].dsts, ElementsAre(2, 3));
    EXPECT_EQ(steps[0].forks[0].num_tokens, 5);
    EXPECT_THAT(steps[0].release, ElementsAre(8));
    ASSERT_THAT(steps[0].spans, SizeIs(3));
    EXPECT_EQ(steps[0].spans[2].seq, 3);
    EXPECT_EQ(steps[0].spans[2].past_len, 5);
  }
}

}  // namespace
}  // namespace meshserve
