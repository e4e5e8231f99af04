// RunProgram's deadline: a request past it stops before its next step with
// DEADLINE_EXCEEDED naming the request and the step; a receive waits only
// until it.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/base/dtype.h"
#include "common/program/ir_conv.h"
#include "server/worker/rendezvous.h"
#include "server/worker/worker_engine_internal.h"
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
    SliceIr x{"x", 0, IrBox({{0, 4}}), DTypeToProto(DType::kFloat32), std::string(16, '\0')};
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
                       absl::Now() - absl::Milliseconds(1))
                       .status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("step 0 (output 'y' from 'in/x')"),
                    HasSubstr("request 'r1' passed its deadline"),
                    HasSubstr("1 of 1 steps not run")));
}

TEST_F(ProgramRunDeadlineTest, ReceiveWaitsOnlyUntilTheDeadline) {
  // Nothing is ever sent: the receive ends at the deadline, naming the step.
  absl::Status s = Run("r2",
                       {Recv(0, "b", IrBox({{0, 4}}), "t", false, IrBox({{0, 4}}),
                             DTypeToProto(DType::kFloat32), 1),
                        Output(0, "b", IrBox({{0, 4}}), "y")},
                       absl::Now() + absl::Milliseconds(50))
                       .status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("step 0 (recv 'b' tag 't' from worker 1)"),
                    HasSubstr("before the deadline")));
}

}  // namespace
}  // namespace meshserve
