#include "server/coordinator/fan_out.h"

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/elastic_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

TEST(IsWorkerFailureTest, TruthTable) {
  EXPECT_TRUE(IsWorkerFailure(absl::UnavailableError("gone")));
  EXPECT_TRUE(IsWorkerFailure(absl::DeadlineExceededError("slow")));
  EXPECT_TRUE(IsWorkerFailure(absl::CancelledError("cancelled")));
  EXPECT_FALSE(IsWorkerFailure(absl::OkStatus()));
  EXPECT_FALSE(IsWorkerFailure(absl::AbortedError("peer failed")));
  EXPECT_FALSE(IsWorkerFailure(absl::FailedPreconditionError("unknown program")));
  EXPECT_FALSE(IsWorkerFailure(absl::InvalidArgumentError("bad box")));
  EXPECT_FALSE(IsWorkerFailure(absl::DataLossError("truncated")));
}

TEST(ParallelCallTest, ReturnsResultsInWorkerOrder) {
  const std::vector<int64_t> ids = {7, 3, 11};
  std::vector<absl::StatusOr<std::string>> results =
      ParallelCall(ids, [](int64_t id) -> absl::StatusOr<std::string> {
        if (id == 3) return absl::UnavailableError("worker 3 down");
        return absl::StrCat("w", id);
      });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_THAT(results[0], IsOkAndHolds("w7"));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kUnavailable, "worker 3 down"));
  EXPECT_THAT(results[2], IsOkAndHolds("w11"));
  std::vector<absl::Status> statuses =
      ParallelCall(ids, [](int64_t id) { return absl::OkStatus(); });
  EXPECT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(ParallelCall({}, [](int64_t) { return absl::OkStatus(); }).empty());
}

// Every call waits until all calls have started, as the calls of one request
// do (cross-worker receives): this needs all of them running at once.
std::vector<absl::Status> CallsThatWaitForEachOther(int n) {
  std::vector<int64_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  absl::Mutex mu;
  int started = 0;
  return ParallelCall(ids, [&](int64_t id) {
    absl::MutexLock lock(&mu);
    ++started;
    auto all = [&]() { return started == n; };
    if (!mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20))) {
      return absl::DeadlineExceededError(absl::StrCat("call ", id, " waited alone"));
    }
    return absl::OkStatus();
  });
}

TEST(ParallelCallTest, AllCallsOfAFanOutRunAtOnce) {
  for (const absl::Status& s : CallsThatWaitForEachOther(32)) EXPECT_OK(s);
}

TEST(ParallelCallTest, SteadyStateStartsNoThreads) {
  ElasticExecutor& executor = ElasticExecutor::Shared();
  auto wait_idle = [&] {
    for (auto s = executor.stats(); s.idle != s.threads; s = executor.stats()) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  for (const absl::Status& s : CallsThatWaitForEachOther(8)) ASSERT_OK(s);
  wait_idle();
  const int64_t started = executor.stats().started;
  for (int round = 0; round < 10; ++round) {
    for (const absl::Status& s : CallsThatWaitForEachOther(8)) ASSERT_OK(s);
    wait_idle();
  }
  EXPECT_EQ(executor.stats().started, started);
}

TEST(ParallelCallTest, CallsMayFanOutAgain) {
  const std::vector<int64_t> outer = {1, 2};
  std::vector<int64_t> sums = ParallelCall(outer, [](int64_t id) {
    const std::vector<int64_t> inner = {10 * id, 10 * id + 1};
    int64_t sum = 0;
    for (int64_t v : ParallelCall(inner, [](int64_t x) { return x; })) sum += v;
    return sum;
  });
  EXPECT_THAT(sums, ElementsAre(21, 41));
}

}  // namespace
}  // namespace meshserve
