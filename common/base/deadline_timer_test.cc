// DeadlineTimer: entries run once at their time, in order; a removed entry
// never runs; an entry earlier than the thread's sleep wakes it.
#include "common/base/deadline_timer.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(DeadlineTimerTest, RunsEntriesInDeadlineOrder) {
  DeadlineTimer timer;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification last;
  const absl::Time now = absl::Now();
  timer.Add(now + absl::Milliseconds(60), [&]() {
    absl::MutexLock lock(&mu);
    order.push_back(3);
    last.Notify();
  });
  timer.Add(now + absl::Milliseconds(20), [&]() {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  timer.Add(now + absl::Milliseconds(40), [&]() {
    absl::MutexLock lock(&mu);
    order.push_back(2);
  });
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - now, absl::Milliseconds(60));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timer.size(), 0);
}

TEST(DeadlineTimerTest, RemovedEntryNeverRuns) {
  DeadlineTimer timer;
  absl::Notification ran, other;
  DeadlineTimer::Id id = timer.Add(absl::Now() + absl::Milliseconds(30), [&]() { ran.Notify(); });
  EXPECT_TRUE(timer.Remove(id));
  EXPECT_FALSE(timer.Remove(id));
  timer.Add(absl::Now() + absl::Milliseconds(60), [&]() { other.Notify(); });
  ASSERT_TRUE(other.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran.HasBeenNotified());
}

TEST(DeadlineTimerTest, EarlierEntryWakesALongSleep) {
  DeadlineTimer timer;
  timer.Add(absl::Now() + absl::Hours(1), []() {});
  absl::SleepFor(absl::Milliseconds(20));  // the thread now sleeps for an hour
  absl::Notification ran;
  const absl::Time start = absl::Now();
  timer.Add(start + absl::Milliseconds(10), [&]() { ran.Notify(); });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Well before the idle second: the new entry woke the thread.
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_EQ(timer.size(), 1);  // the hour's entry is dropped at destruction
}

}  // namespace
}  // namespace meshserve
