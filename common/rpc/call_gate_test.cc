#include "common/rpc/call_gate.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

TEST(CallGateTest, CountsAdmittedCallsUntilTheirPassesEnd) {
  CallGate gate("coordinator");
  {
    absl::StatusOr<CallGate::Pass> a = gate.Enter();
    ASSERT_TRUE(a.ok());
    absl::StatusOr<CallGate::Pass> b = gate.Enter();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(gate.inside(), 2);
    CallGate::Pass moved = *std::move(b);
    EXPECT_EQ(gate.inside(), 2);  // a move hands the count over, once
  }
  EXPECT_EQ(gate.inside(), 0);
  EXPECT_TRUE(gate.WaitUntilEmpty(absl::ZeroDuration()));
}

TEST(CallGateTest, AClosedGateRefusesWithUnavailableNamingTheServer) {
  CallGate gate("coordinator");
  gate.Close();
  EXPECT_THAT(gate.Enter().status(),
              StatusIs(absl::StatusCode::kUnavailable, "coordinator is stopping"));
  EXPECT_EQ(gate.inside(), 0);
}

TEST(CallGateTest, WaitUntilEmptyWaitsForTheCallsInsideAndTimesOut) {
  CallGate gate("coordinator");
  std::optional<absl::StatusOr<CallGate::Pass>> pass(gate.Enter());
  ASSERT_TRUE(pass->ok());
  gate.Close();
  EXPECT_FALSE(gate.WaitUntilEmpty(absl::Milliseconds(20)));  // the call is still inside
  absl::Notification waiting;
  std::thread ender([&] {
    waiting.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(20));
    pass.reset();
  });
  waiting.Notify();
  EXPECT_TRUE(gate.WaitUntilEmpty(absl::Seconds(30)));
  EXPECT_EQ(gate.inside(), 0);
  ender.join();
}

}  // namespace
}  // namespace meshserve
