#include "common/base/parallel_for.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(ParallelForTest, RunsEveryIndexOnce) {
  std::vector<std::atomic<int>> calls(100);
  ParallelFor(calls.size(), [&](size_t i) { calls[i].fetch_add(1); });
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].load(), 1) << i;
}

TEST(ParallelForTest, ZeroCallsNothing) {
  int calls = 0;
  ParallelFor(0, [&](size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelForTest, OneRunsIndexZero) {
  std::vector<size_t> seen;
  ParallelFor(1, [&](size_t i) { seen.push_back(i); });
  EXPECT_EQ(seen, std::vector<size_t>{0});
}

// Every call waits until all have started: each sees all n arrive only if
// all n run at once, as calls to workers that wait for each other's data need
// (the wait has a timeout, so a regression fails instead of hanging).
TEST(ParallelForTest, CallsThatWaitForEachOtherAllRun) {
  constexpr int kN = 32;
  absl::Mutex mu;
  int arrived = 0;
  std::atomic<int> saw_all{0};
  ParallelFor(kN, [&](size_t) {
    absl::MutexLock lock(&mu);
    ++arrived;
    auto all = [&]() { return arrived >= kN; };
    if (mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20))) saw_all.fetch_add(1);
  });
  EXPECT_EQ(saw_all.load(), kN);
}

TEST(ParallelForTest, NestedFanOutsComplete) {
  std::atomic<int> leaves{0};
  ParallelFor(4, [&](size_t) { ParallelFor(5, [&](size_t) { leaves.fetch_add(1); }); });
  EXPECT_EQ(leaves.load(), 20);
}

}  // namespace
}  // namespace meshserve
