// CallsInFlight: OnSettled runs exactly once, on the callback that settles
// the calls (the last to finish, or the first to fail) or at once when they
// settled already, and never after Claim; Wait returns at once for calls that
// all returned, and cancels the others on a failure.
#include "server/coordinator/calls_in_flight.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {
namespace {

ExecuteResult Result(const std::string& name) {
  ExecuteResult r;
  r.outputs.emplace_back();
  r.outputs.back().name = name;
  return r;
}

TEST(CallsInFlightTest, SettlesWhenTheLastCallReturns) {
  CallsInFlight calls(2);
  int settled = 0;
  calls.OnSettled([&] { ++settled; });
  calls.Finish(1, Result("b"));
  EXPECT_EQ(settled, 0);
  EXPECT_FALSE(calls.AllOk());
  calls.Finish(0, Result("a"));
  EXPECT_EQ(settled, 1);
  EXPECT_TRUE(calls.AllOk());
  EXPECT_FALSE(calls.Claim());  // it ran

  // Wait does not block, cancels nothing, and the results keep call order.
  WorkerRegistry registry(absl::Milliseconds(50), 3);
  int cancels = 0;
  int first_failed = 7;
  absl::Status first_status;
  EXPECT_EQ(calls.Wait({10, 11}, registry, [&](int64_t) { ++cancels; }, &first_failed,
                       &first_status),
            -1);
  EXPECT_EQ(first_failed, -1);
  EXPECT_EQ(cancels, 0);
  std::vector<absl::StatusOr<ExecuteResult>> results = calls.TakeResults();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]->outputs[0].name, "a");
  EXPECT_EQ(results[1]->outputs[0].name, "b");
}

TEST(CallsInFlightTest, TheFirstFailureSettlesAndWaitCancelsTheOthers) {
  CallsInFlight calls(3);
  int settled = 0;
  calls.OnSettled([&] { ++settled; });
  calls.Finish(2, absl::UnavailableError("worker gone"));
  EXPECT_EQ(settled, 1);
  EXPECT_FALSE(calls.AllOk());
  std::thread rest([&] {
    absl::SleepFor(absl::Milliseconds(20));
    calls.Finish(0, Result("a"));
    calls.Finish(1, absl::CancelledError("cancelled"));
  });
  WorkerRegistry registry(absl::Milliseconds(50), 3);
  std::vector<int64_t> cancelled;
  int first_failed = -1;
  absl::Status first_status;
  EXPECT_EQ(calls.Wait({10, 11, 12}, registry,
                       [&](int64_t failed) { cancelled.push_back(failed); }, &first_failed,
                       &first_status),
            -1);
  rest.join();
  EXPECT_EQ(settled, 1);  // once, not again for the later calls
  EXPECT_EQ(first_failed, 2);
  EXPECT_TRUE(absl::IsUnavailable(first_status));
  EXPECT_EQ(cancelled, std::vector<int64_t>{12});  // the others, once, naming the cause
}

// A stalled worker declared suspect is given up and its peers cancelled;
// their ABORTED answers to that cancellation are not the cause (fault
// schedule: before, the first of them was reported and the request failed
// with ABORTED instead of being retried as a lost worker).
TEST(CallsInFlightTest, PeersAnswersToAGivenUpCallAreNotTheCause) {
  WorkerRegistry registry(absl::Milliseconds(50), 3);
  const absl::Time now = absl::Now();
  absl::StatusOr<int64_t> a = registry.Register("127.0.0.1:1", 1, 1 << 20, -1, now);
  absl::StatusOr<int64_t> b = registry.Register("127.0.0.1:2", 1, 1 << 20, -1, now);
  ASSERT_TRUE(a.ok() && b.ok());
  CallsInFlight calls(2);
  registry.MarkSuspect(*b);  // stalled: its call never returns
  int cancels = 0;
  int first_failed = 7;
  absl::Status first_status;
  const int abandoned = calls.Wait(
      {*a, *b}, registry,
      [&](int64_t failed) {
        EXPECT_EQ(failed, *b);
        ++cancels;
        // The peer answers the cancellation while the wait cancels.
        calls.Finish(0, absl::AbortedError("request 'r' cancelled: worker 1 failed"));
      },
      &first_failed, &first_status);
  EXPECT_EQ(abandoned, 1);
  EXPECT_EQ(first_failed, -1);
  EXPECT_EQ(cancels, 1);
  calls.Finish(1, absl::UnavailableError("stream ended"));  // later, on its own
}

// A peer's ABORTED (its run cancelled) that arrives before the failure that
// caused it is not the cause: a RESOURCE_EXHAUSTED must reach the client as
// is, not be retried as an ABORTED.
TEST(CallsInFlightTest, AnAbortedPeerGivesWayToTheFailureBehindIt) {
  WorkerRegistry registry(absl::Milliseconds(50), 3);
  CallsInFlight calls(3);
  calls.Finish(0, absl::AbortedError("request 'r' cancelled: worker 2 failed"));
  std::thread rest([&] {
    absl::SleepFor(absl::Milliseconds(20));
    calls.Finish(2, absl::ResourceExhaustedError("a slice of 49152 bytes does not fit"));
    calls.Finish(1, absl::AbortedError("request 'r' cancelled: worker 2 failed"));
  });
  int first_failed = -1;
  absl::Status first_status;
  EXPECT_EQ(calls.Wait({10, 11, 12}, registry, [](int64_t) {}, &first_failed, &first_status),
            -1);
  rest.join();
  EXPECT_EQ(first_failed, 2);
  EXPECT_TRUE(absl::IsResourceExhausted(first_status)) << first_status;
}

TEST(CallsInFlightTest, OnSettledRunsAtOnceWhenTheCallsSettledBefore) {
  CallsInFlight calls(1);
  calls.Finish(0, Result("a"));
  int settled = 0;
  calls.OnSettled([&] { ++settled; });
  EXPECT_EQ(settled, 1);
}

TEST(CallsInFlightTest, ClaimTakesTheCallsFromOnSettled) {
  CallsInFlight calls(2);
  int settled = 0;
  calls.OnSettled([&] { ++settled; });
  EXPECT_TRUE(calls.Claim());
  EXPECT_FALSE(calls.Claim());
  calls.Finish(0, Result("a"));
  calls.Finish(1, Result("b"));
  EXPECT_EQ(settled, 0);
  // Claimed before OnSettled: it never runs either.
  CallsInFlight later(1);
  EXPECT_TRUE(later.Claim());
  later.Finish(0, Result("a"));
  later.OnSettled([&] { ++settled; });
  EXPECT_EQ(settled, 0);
}

TEST(CallsInFlightTest, ExactlyOneOfConcurrentFinishesAndAClaimWins) {
  for (int round = 0; round < 200; ++round) {
    CallsInFlight calls(4);
    std::atomic<int> settled{0};
    std::atomic<int> claimed{0};
    calls.OnSettled([&] { ++settled; });
    std::vector<std::thread> threads;
    for (size_t i = 0; i < 4; ++i) {
      threads.emplace_back([&calls, i] { calls.Finish(i, Result("x")); });
    }
    threads.emplace_back([&] { claimed += calls.Claim() ? 1 : 0; });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(settled + claimed, 1) << "round " << round;
    EXPECT_TRUE(calls.AllOk());
  }
}

}  // namespace
}  // namespace meshserve
