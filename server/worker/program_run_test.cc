// RunProgram's deadline: a request past it stops before its next step with
// DEADLINE_EXCEEDED naming the request and the step; a receive waits only
// until it. A copy of a param's slice that a dot_general reads is read in
// place: the same numbers as naive loops, and a later reader gets the copy.
// A kUse run that skips a param-only send still sends what was queued
// before it ahead of its next receive (a peer waits for it).
#include <unistd.h>

#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <variant>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/base/dtype.h"
#include "common/base/deadline_timer.h"
#include "common/base/host_memory.h"
#include "common/program/ir_conv.h"
#include "server/worker/rendezvous.h"
#include "server/worker/model_loader.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/program_run.h"
#include "server/worker/program_runner.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace ::meshserve::program_testing;  // NOLINT

class ProgramRunDeadlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LoadModelIr load;
    load.model = "id";
    load.generation = 1;
    load.model_json = R"({"name": "id", "mesh": {"x": 1}, "dtype": "float32",
      "inputs": {"x": {"shape": [4], "sharding": [null]}}, "params": {},
      "layers": [{"name": "y", "op": "relu", "input": "x"}], "outputs": ["y"]})";
    load.mesh = {MeshAxisIr{"x", 1, ""}};
    load.devices = {0};
    load.device_workers = {0};
    ASSERT_OK_AND_ASSIGN(BuiltModel built, BuildLoadedModel(load, LoadContext{/*worker_id=*/0}));
    model_ = built.model;
  }
  // Input x on device 0 (4 floats), then `steps`.
  absl::StatusOr<std::vector<SliceIr>> Run(const std::string& request_id,
                                           std::vector<StepIr> steps, absl::Time deadline) {
    EXPECT_OK(rendezvous_.StartRequest(request_id));
    SliceIr x{"x", 0, IrBox({{0, 4}}), DType::kFloat32, std::string(16, '\0')};
    absl::StatusOr<std::vector<SliceIr>> out =
        RunProgram(ProgramOf("p", "id", 1, 0, std::move(steps)), *model_, request_id, {x},
                   deadline, RunContext{&rendezvous_, nullptr, 0});
    rendezvous_.FinishRequest(request_id);
    return out;
  }

  std::shared_ptr<const LoadedModel> model_;
  Rendezvous rendezvous_;
};

TEST_F(ProgramRunDeadlineTest, RunsBeforeTheDeadline) {
  ASSERT_OK_AND_ASSIGN(std::vector<SliceIr> out,
                       Run("r0", {Output(0, "in/x", IrBox({{0, 4}}), "y")},
                           absl::Now() + absl::Seconds(60)));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "y");
}

TEST_F(ProgramRunDeadlineTest, StopsBeforeTheNextStepPastTheDeadline) {
  absl::Status s = Run("r1", {Output(0, "in/x", IrBox({{0, 4}}), "y")},
                       absl::Now() - absl::Seconds(3))
                       .status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("step 0 (output 'y' from 'in/x')"),
                    HasSubstr("request 'r1' passed its deadline "),
                    HasSubstr(" ago, before this step"), HasSubstr("1 of 1 steps not run")));
  // How late: at least the 3 s it was already past when it started.
  std::smatch late;
  const std::string message(s.message());
  ASSERT_TRUE(std::regex_search(message, late, std::regex("deadline (\\S+) ago"))) << message;
  absl::Duration by;
  ASSERT_TRUE(absl::ParseDuration(late[1].str(), &by)) << late[1];
  EXPECT_GE(by, absl::Seconds(3));
}

TEST_F(ProgramRunDeadlineTest, ReceiveWaitsOnlyUntilTheDeadline) {
  // Nothing is ever sent: the receive ends at the deadline, naming the step.
  absl::Status s = Run("r2",
                       {Recv(0, "b", IrBox({{0, 4}}), "t", false, IrBox({{0, 4}}),
                             DType::kFloat32, 1),
                        Output(0, "b", IrBox({{0, 4}}), "y")},
                       absl::Now() + absl::Milliseconds(50))
                       .status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("step 0 (recv 'b' tag 't' from worker 1)"),
                    HasSubstr("before the deadline")));
}

// The names of `steps` in order (StepName-like, enough to see the order).
std::vector<std::string> Order(const std::vector<StepIr>& steps) {
  std::vector<std::string> names;
  for (const StepIr& step : steps) {
    if (const auto* s = std::get_if<SendStepIr>(&step)) names.push_back("send " + s->tag);
    if (const auto* s = std::get_if<RecvStepIr>(&step)) names.push_back("recv " + s->tag);
    if (const auto* s = std::get_if<CopyStepIr>(&step)) names.push_back("copy " + s->dst);
    if (const auto* s = std::get_if<ComputeStepIr>(&step)) names.push_back("compute " + s->output);
    if (const auto* s = std::get_if<FreeStepIr>(&step)) names.push_back("free " + s->buffer);
    if (const auto* s = std::get_if<OutputStepIr>(&step)) names.push_back("output " + s->output);
  }
  return names;
}

// An all-to-all as the compiler ordered it on one worker: its receives
// first, then its sends of a buffer computed before them. The sends move
// before the first receive; a send of a buffer a receive writes stays after
// it; sends to the same place keep their order.
TEST(ScheduleSendsTest, MovesSendsBeforeTheReceivesTheyDoNotDependOn) {
  const BoxIr b = IrBox({{0, 4}});
  const DType f32 = DType::kFloat32;
  std::vector<StepIr> steps = {
      Compute(0, ComputeOp::kRelu, {"in/x"}, "y", b),
      Copy(0, "y", b, 0, "z", b, f32),
      Recv(0, "z", b, "r1", true, b, f32, 1),
      Recv(0, "w", b, "r2", false, b, f32, 1),
      Send(0, "y", b, 1, 0, "s1"),
      Send(0, "w", b, 1, 0, "s2"),  // reads what r2 wrote: stays after it
      Send(0, "y", b, 1, 0, "s3"),
      Free(0, "y"),
      Send(0, "in/x", b, 1, 0, "s4"),  // an input: never written here
      Output(0, "z", b, "out"),
  };
  EXPECT_THAT(Order(ScheduleSends(steps)),
              ::testing::ElementsAre("compute y", "copy z", "send s1", "send s3", "send s4",
                                     "recv r1", "recv r2", "send s2", "free y", "output out"));
}

TEST(ScheduleSendsTest, LeavesAProgramWithoutReceivesAsItIs) {
  const BoxIr b = IrBox({{0, 4}});
  std::vector<StepIr> steps = {Send(0, "in/x", b, 1, 0, "s1"),
                               Compute(0, ComputeOp::kRelu, {"in/x"}, "y", b),
                               Send(0, "y", b, 1, 0, "s2"), Output(0, "y", b, "out")};
  EXPECT_THAT(Order(ScheduleSends(steps)),
              ::testing::ElementsAre("send s1", "compute y",
                                     "send s2", "output out"));
}

// A one-device model with param w = rows 0:4 x cols 0:6 (w[r][c] = r - 0.5 c).
std::shared_ptr<LoadedModel> ModelWithParam() {
  auto model = std::make_shared<LoadedModel>();
  model->model = "m";
  model->generation = 1;
  model->devices = {0};
  model->device_workers = {0};
  model->worker_id = 0;
  std::vector<float> w(24);
  for (int i = 0; i < 24; ++i) w[i] = static_cast<float>(i / 6) - 0.5f * static_cast<float>(i % 6);
  model->params[0]["w"] = std::make_shared<const BoxTensor>(*BoxTensor::Wrap(
      Box({{0, 4}, {0, 6}}), *Tensor::FromValues(DType::kFloat32, {4, 6}, w)));
  return model;
}

TEST(ProgramRunParamSliceTest, DotGeneralReadsTheSliceAndOtherReadersACopy) {
  std::shared_ptr<LoadedModel> model = ModelWithParam();
  const DType f32 = DType::kFloat32;
  // x = [1, 2, 3] (one row); rows 1:3 as W [N, K] over cols 2:5 (strided):
  // y[n] = sum_k x[k] * w[1 + n][2 + k].
  std::string x_bytes(12, '\0');
  const float xs[] = {1, 2, 3};
  std::memcpy(&x_bytes[0], xs, 12);
  SliceIr x{"x", 0, IrBox({{0, 1}, {0, 3}}), f32, x_bytes};
  const BoxIr box = IrBox({{1, 3}, {2, 5}});
  ComputeStepIr dot =
      Compute(0, ComputeOp::kDotGeneral, {"in/x", "ws"}, "y", IrBox({{0, 1}, {0, 2}}), f32);
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {1};
  Rendezvous rendezvous;
  ASSERT_OK(rendezvous.StartRequest("r"));
  ASSERT_OK_AND_ASSIGN(
      std::vector<SliceIr> out,
      RunProgram(ProgramOf("p", "m", 1, 0,
                           {Copy(0, "param/w", box, 0, "ws", box, f32), dot,
                            Output(0, "y", IrBox({{0, 1}, {0, 2}}), "y"),
                            Output(0, "ws", box, "ws"), Free(0, "ws")}),
                 *model, "r", {x}, absl::Now() + absl::Seconds(60),
                 RunContext{&rendezvous, nullptr, 0}));
  rendezvous.FinishRequest("r");
  ASSERT_EQ(out.size(), 2u);
  ASSERT_OK_AND_ASSIGN(BoxTensor y, BoxTensorFromSlice(out[0]));
  for (int n = 0; n < 2; ++n) {
    float want = 0;
    for (int k = 0; k < 3; ++k) want += xs[k] * (static_cast<float>(1 + n) - 0.5f * (2 + k));
    EXPECT_FLOAT_EQ(y.tensor.ToFloatVector()[n], want) << n;
  }
  ASSERT_OK_AND_ASSIGN(BoxTensor ws, BoxTensorFromSlice(out[1]));
  EXPECT_EQ(ws.box, Box({{1, 3}, {2, 5}}));
  EXPECT_EQ(ws.tensor.ToFloatVector(), (std::vector<float>{0, -0.5, -1, 1, 0.5, 0}));
}

// A peer that answers: worker 1 sends its slice under "reply" once it has
// this worker's "act" (as in an all-gather, where each side's receive waits
// for the other's send). Every send succeeds; the tags sent are recorded.
class AnsweringPeer : public PeerTransport {
 public:
  explicit AnsweringPeer(Rendezvous* rendezvous) : rendezvous_(rendezvous) {}
  void Send(OutgoingSlice slice, DoneCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      tags_.push_back(slice.tag);
    }
    absl::Status answered;
    if (slice.tag == "act") {
      answered = rendezvous_->DeliverChunk(slice.request_id, "reply",
                                           static_cast<int64_t>(slice.bytes.size()), 0,
                                           slice.bytes, /*src_worker=*/1, DType::kFloat32);
    }
    done(answered);
  }
  std::vector<std::string> tags() {
    absl::MutexLock lock(&mu_);
    return tags_;
  }

 private:
  Rendezvous* const rendezvous_;
  absl::Mutex mu_;
  std::vector<std::string> tags_ ABSL_GUARDED_BY(mu_);
};

// A kUse run skips a param-only send that sits between an activation's send
// and the receive of the peer's answer (the compiler's all-gathers of an
// activation and of a kernel, e.g. a Megatron layout at 64 rows): the
// activation must still go out before the receive waits. It once stayed
// queued, both workers waited for each other until the deadline, and every
// request after the first (kFill) one hung.
TEST(ProgramRunParamCacheTest, UseRunSendsWhatASkippedStepLeftQueuedBeforeItsReceive) {
  std::shared_ptr<const LoadedModel> model = ModelWithParam();
  const DType f32 = DType::kFloat32;
  const float xs[] = {1.5f, -2, 3, 0.25f};
  std::string x_bytes(16, '\0');
  std::memcpy(&x_bytes[0], xs, 16);
  ProgramIr ir = ProgramOf("p", "m", 1, 0,
                           {Send(0, "in/x", IrBox({{0, 4}}), 1, 1, "act"),
                            Send(0, "param/w", IrBox({{0, 4}, {0, 6}}), 1, 1, "kernel"),
                            Recv(0, "b", IrBox({{0, 4}}), "reply", false, IrBox({{0, 4}}), f32, 1),
                            Output(0, "b", IrBox({{0, 4}}), "y")});
  ir.param_only_steps = {1};
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<InstalledProgram> program, PrepareProgram(ir));
  ASSERT_EQ(program->param_only.marked, (std::vector<bool>{false, true, false, false}));
  Rendezvous rendezvous;
  AnsweringPeer peer(&rendezvous);
  DeadlineTimer timer;
  ASSERT_OK(rendezvous.StartRequest("r"));
  RunContext context{&rendezvous, &peer, 0, &timer};
  context.param_cache = ParamCacheMode::kUse;
  absl::Notification finished;
  absl::StatusOr<std::vector<SliceIr>> out;
  RunProgramAsync(program, model, "r", {SliceIr{"x", 0, IrBox({{0, 4}}), f32, x_bytes}},
                  absl::Now() + absl::Seconds(3), context,
                  [&](absl::StatusOr<std::vector<SliceIr>> result) {
                    out = std::move(result);
                    finished.Notify();
                  });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(30)));
  rendezvous.FinishRequest("r");
  ASSERT_OK(out.status());
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].data, x_bytes);  // the peer's answer: this worker's "act"
  EXPECT_EQ(peer.tags(), (std::vector<std::string>{"act"}));  // "kernel" skipped
}

// The default in-flight slice bound: a quarter of the host's memory over
// its workers, clamped to [64 MiB, 4 GiB]; figures worked by hand.
TEST(DefaultMaxInflightSliceBytesTest, AQuarterOfTheHostOverItsWorkers) {
  constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  EXPECT_EQ(DefaultMaxInflightSliceBytes(24 * kGiB, 4), 1536 * kMiB);
  EXPECT_EQ(DefaultMaxInflightSliceBytes(24 * kGiB, 1), 4 * kGiB);  // 6 GiB, capped
  EXPECT_EQ(DefaultMaxInflightSliceBytes(4 * kGiB, 1), 1 * kGiB);
  EXPECT_EQ(DefaultMaxInflightSliceBytes(1 * kGiB, 8), 64 * kMiB);  // 32 MiB, raised
  EXPECT_EQ(DefaultMaxInflightSliceBytes(24 * kGiB, 0), 4 * kGiB);  // 0 workers: as 1
  EXPECT_EQ(DefaultMaxInflightSliceBytes(0, 1), 64 * kMiB);
}

// MemTotal is the kernel's total RAM, which sysinfo (glibc's _SC_PHYS_PAGES)
// reports too.
TEST(DefaultMaxInflightSliceBytesTest, HostMemoryIsMemTotal) {
  const int64_t phys =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(HostMemoryBytes(), 0);
  EXPECT_NEAR(static_cast<double>(HostMemoryBytes()), static_cast<double>(phys),
              static_cast<double>(sysconf(_SC_PAGESIZE)));
}

}  // namespace
}  // namespace meshserve
