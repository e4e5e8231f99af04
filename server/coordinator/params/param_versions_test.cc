// The weight-version bound (--max_live_versions) over fake workers: the
// placements a test holds stand for the generation sequences that pin their
// version; a push whose commit would make more versions live waits for one
// to drain, and fails at its deadline naming the bound and the holders. A
// scale step after a lost worker carries each held version to the new
// placement (its bytes moved from the surviving holders), and unloads it there
// once nothing holds it.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

// The 32 bytes of b = fill everywhere.
std::string Fill(float fill) {
  std::vector<float> v(8, fill);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// One param, sharded over the workers.
constexpr char kModel[] = R"({
  "name": "lv", "mesh": {"data": -1}, "dtype": "float32",
  "inputs": {"x": {"shape": [4, 2], "sharding": ["data", null]}},
  "params": {"b": {"shape": [4, 2], "sharding": ["data", null]}},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

class LiveVersionsTest : public ::testing::Test {
 protected:
  // Two workers, the model placed at version 1; pushes without a call
  // deadline wait up to `wait` (options.load_timeout).
  void Start(int max_live_versions, absl::Duration wait) {
    const std::string dir =
        absl::StrCat(::testing::TempDir(), "/live_versions_", getpid(), "_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/lv.json") << kModel;
    CoordinatorOptions options;
    options.model_dir = dir;
    options.run_control_thread = false;
    options.heartbeat_interval = absl::Seconds(30);
    options.load_timeout = wait;
    options.max_live_versions = max_live_versions;
    ASSERT_OK_AND_ASSIGN(coordinator_, Coordinator::Create(options, cluster_.Factory(),
                                                           std::make_unique<FakeModelCompiler>()));
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(coordinator_->RegisterWorker(absl::StrCat("127.0.0.1:", 9300 + i), 2, 1 << 30, -1)
                    .status());
    }
    coordinator_->Tick();
    ASSERT_EQ(Status().version, 1);
  }
  ModelStatus Status() {
    absl::StatusOr<ModelStatus> s = coordinator_->GetModelStatus("lv");
    EXPECT_OK(s.status());
    return s.ok() ? *s : ModelStatus();
  }
  // What a sequence starting now holds until it ends.
  std::shared_ptr<const Placement> Hold() { return Status().placement; }
  absl::StatusOr<PushResult> Push(float fill) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("lv"));
    MS_RETURN_IF_ERROR(push->Add({"lv", "b", {0, 0}, {4, 2}, DType::kFloat32, 0, Fill(fill)}));
    return push->Finish();
  }
  // The model serves `version`, and b pulls as Fill(fill).
  void ExpectServes(int64_t version, float fill) {
    EXPECT_EQ(Status().version, version);
    EXPECT_EQ(Pulled(), Fill(fill));
  }
  // The current value of b (pulled).
  std::string Pulled() {
    std::string out;
    EXPECT_OK(coordinator_->PullParams("lv", {"b"}, [&out](PullChunk c) {
      out += c.data;
      return absl::OkStatus();
    }));
    return out;
  }

  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(LiveVersionsTest, AFourthVersionWaitsUntilTheOldestDrains) {
  Start(3, absl::Seconds(600));
  std::shared_ptr<const Placement> v1 = Hold();
  ASSERT_OK(Push(2).status());
  std::shared_ptr<const Placement> v2 = Hold();
  ASSERT_OK(Push(3).status());
  std::shared_ptr<const Placement> v3 = Hold();
  EXPECT_EQ(v3->version, 3);
  EXPECT_THAT(
      Status().held_versions,
      ::testing::ElementsAre(::testing::Pair(1, 1), ::testing::Pair(2, 1), ::testing::Pair(3, 1)));

  absl::StatusOr<PushResult> fourth = absl::UnknownError("not run");
  std::atomic<bool> done{false};
  std::thread pusher([&] {
    fourth = Push(4);
    done = true;
  });
  while (!done && Status().commits_waiting == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(done) << fourth.status();
  // Waiting: nothing switched, v3 still served and pulled.
  ExpectServes(3, 3);
  v1.reset();  // the oldest version's last sequence ends
  pusher.join();
  ASSERT_OK(fourth.status());
  EXPECT_EQ(fourth->version, 4);
  ExpectServes(4, 4);
  EXPECT_EQ(Status().commits_waiting, 0);
  EXPECT_THAT(Status().held_versions,
              ::testing::ElementsAre(::testing::Pair(2, 1), ::testing::Pair(3, 1)));
}

TEST_F(LiveVersionsTest, WithoutADrainThePushFailsAtItsDeadlineAndNothingChanges) {
  Start(3, absl::Milliseconds(300));
  std::shared_ptr<const Placement> v1 = Hold();
  std::shared_ptr<const Placement> v1_again = Hold();  // two sequences on v1
  ASSERT_OK(Push(2).status());
  std::shared_ptr<const Placement> v2 = Hold();
  ASSERT_OK(Push(3).status());
  std::shared_ptr<const Placement> v3 = Hold();
  absl::Status late = Push(4).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_THAT(
      std::string(late.message()),
      ::testing::AllOf(::testing::HasSubstr("push to model 'lv': its commit would make 4 weight "
                                            "versions live, over --max_live_versions=3"),
                       ::testing::HasSubstr("v1 by 2, v2 by 1, v3 by 1"),
                       ::testing::HasSubstr("nothing changed")));
  ExpectServes(3, 3);
  EXPECT_EQ(Status().commits_waiting, 0);
  // Still two sequences on v1: one ending is not enough.
  v1.reset();
  EXPECT_THAT(Push(4),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded, "v1 by 1, v2 by 1, v3 by 1"));
  v1_again.reset();
  ASSERT_OK(Push(5).status());
  ExpectServes(4, 5);
}

TEST_F(LiveVersionsTest, ABoundOfOneWaitsForTheCurrentVersionToBeIdle) {
  Start(1, absl::Milliseconds(300));
  // Nothing holds v1 (the push's own pin does not count): commits at once.
  ASSERT_OK(Push(2).status());
  EXPECT_EQ(Status().version, 2);
  std::shared_ptr<const Placement> v2 = Hold();
  EXPECT_THAT(Push(3), testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                         "would make 2 weight versions live, over "
                                         "--max_live_versions=1; versions still held (by "
                                         "sequences or requests): v2 by 1;"));
  v2.reset();
  ASSERT_OK(Push(3).status());
  ExpectServes(3, 3);
}

TEST_F(LiveVersionsTest, RetiredVersionsNobodyHoldsDoNotCount) {
  Start(2, absl::Milliseconds(300));
  for (int v = 2; v <= 5; ++v) ASSERT_OK(Push(static_cast<float>(v)).status()) << v;
  EXPECT_EQ(Status().version, 5);
  EXPECT_TRUE(Status().held_versions.empty());
}

// b of (generation, version) as worker `id` holds it, read by halves (rows
// [0:2) and [2:4); each inside a held cell: with replicas a worker holds both).
std::string ReadB(FakeCluster& cluster, int64_t id, int64_t generation, int64_t version) {
  std::string out;
  for (int64_t row : {0, 2}) {
    ReadParamIr call;
    call.model = "lv";
    call.generation = generation;
    call.version = version;
    call.param = "b";
    call.box = BoxToIr(Box({Interval{row, row + 2}, Interval{0, 2}}));
    absl::StatusOr<std::string> bytes = cluster.Worker(id)->ReadParam(call, absl::Seconds(5));
    EXPECT_OK(bytes.status());
    if (bytes.ok()) out += *bytes;
  }
  return out;
}

class CarriedVersionsTest : public LiveVersionsTest {
 protected:
  // Kills the second worker of the current placement and runs a control step.
  void KillOneAndPlace() {
    const int64_t dead = Status().placement->WorkerIds().back();
    cluster_.Worker(dead)->SetDown(true);
    coordinator_->registry().MarkDead(dead);
    coordinator_->Tick();
  }
};

TEST_F(CarriedVersionsTest, AHeldVersionIsLoadedOnTheNewPlacement) {
  Start(3, absl::Seconds(600));
  std::shared_ptr<const Placement> v1 = Hold();  // a sequence on version 1
  const int64_t survivor = v1->WorkerIds().front();
  const std::string v1_bytes = ReadB(cluster_, survivor, v1->generation, 1);
  ASSERT_EQ(v1_bytes.size(), 32u);
  ASSERT_NE(v1_bytes, Fill(2));
  ASSERT_OK(Push(2).status());
  KillOneAndPlace();
  const ModelStatus st = Status();
  ASSERT_TRUE(st.ready) << st.state;
  ASSERT_NE(st.generation, v1->generation);
  EXPECT_EQ(st.version, 2);
  EXPECT_EQ(st.placement->WorkerIds(), std::vector<int64_t>{survivor});
  // Both versions resident on the new generation, each with its own values.
  EXPECT_EQ(cluster_.Worker(survivor)->versions("lv", st.generation),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ReadB(cluster_, survivor, st.generation, 1), v1_bytes);
  EXPECT_EQ(ReadB(cluster_, survivor, st.generation, 2), Fill(2));
  ExpectServes(2, 2);
  // The last sequence on version 1 ends: it leaves the new generation too.
  v1.reset();
  coordinator_->Tick();
  EXPECT_EQ(cluster_.Worker(survivor)->versions("lv", st.generation), std::vector<int64_t>{2});
  // Only `st` holds a placement (the current one).
  EXPECT_THAT(Status().held_versions, ::testing::ElementsAre(::testing::Pair(2, 1)));
}

TEST_F(CarriedVersionsTest, AHeldVersionFollowsASecondScaleStep) {
  Start(3, absl::Seconds(600));
  std::shared_ptr<const Placement> v1 = Hold();
  const std::string v1_bytes = ReadB(cluster_, v1->WorkerIds().front(), v1->generation, 1);
  ASSERT_OK(Push(2).status());
  KillOneAndPlace();
  const int64_t second = Status().generation;
  // A new worker joins: the third generation carries version 1 from the second.
  ASSERT_OK(coordinator_->RegisterWorker("127.0.0.1:9302", 2, 1 << 30, -1).status());
  coordinator_->Tick();
  const ModelStatus st = Status();
  ASSERT_TRUE(st.ready) << st.state;
  ASSERT_NE(st.generation, second);
  ASSERT_EQ(st.placement->WorkerIds().size(), 2u);
  for (int64_t id : st.placement->WorkerIds()) {
    EXPECT_EQ(cluster_.Worker(id)->versions("lv", st.generation), (std::vector<int64_t>{1, 2}))
        << "worker " << id;
    EXPECT_EQ(ReadB(cluster_, id, st.generation, 1), v1_bytes) << "worker " << id;
    EXPECT_EQ(ReadB(cluster_, id, st.generation, 2), Fill(2)) << "worker " << id;
  }
}

TEST_F(CarriedVersionsTest, AHeldVersionThatCannotBeRebuiltIsLeftOut) {
  Start(3, absl::Seconds(600));
  std::shared_ptr<const Placement> v1 = Hold();
  const int64_t survivor = v1->WorkerIds().front();
  ASSERT_OK(Push(2).status());
  // The survivor no longer has version 1: its only other copy dies next.
  ASSERT_OK(cluster_.Worker(survivor)->UnloadModel("lv", v1->generation, 1, absl::Seconds(5)));
  KillOneAndPlace();
  // The scale step goes on with version 2 alone.
  const ModelStatus st = Status();
  ASSERT_TRUE(st.ready) << st.state;
  ASSERT_NE(st.generation, v1->generation);
  EXPECT_EQ(cluster_.Worker(survivor)->versions("lv", st.generation), std::vector<int64_t>{2});
  ExpectServes(2, 2);
}

TEST_F(CarriedVersionsTest, AnUnheldVersionIsNotCarried) {
  Start(3, absl::Seconds(600));
  ASSERT_OK(Push(2).status());
  KillOneAndPlace();
  const ModelStatus st = Status();
  ASSERT_TRUE(st.ready) << st.state;
  EXPECT_EQ(cluster_.Worker(st.placement->WorkerIds().front())->versions("lv", st.generation),
            std::vector<int64_t>{2});
  ExpectServes(2, 2);
}

}  // namespace
}  // namespace meshserve
