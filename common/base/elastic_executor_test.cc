#include "common/base/elastic_executor.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

// `n` tasks that each wait until all `n` have started: a fixed pool with
// fewer than n threads would deadlock (each waits with a timeout here, so a
// regression fails instead of hanging).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  // True when all n arrived within the timeout.
  bool ArriveAndWait() {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= n_; };
    return mu_.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20));
  }

 private:
  const int n_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs `n` tasks that wait for each other; returns how many saw all arrive.
int RunWaitingTasks(ElasticExecutor& executor, int n) {
  Barrier barrier(n);
  std::atomic<int> passed{0};
  absl::BlockingCounter done(n);
  for (int i = 0; i < n; ++i) {
    executor.Schedule([&] {
      if (barrier.ArriveAndWait()) ++passed;
      done.DecrementCount();
    });
  }
  done.Wait();
  return passed;
}

void WaitUntilAllIdle(const ElasticExecutor& executor) {
  for (auto s = executor.stats(); s.idle != s.threads; s = executor.stats()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

class ElasticExecutorTasksTest : public ::testing::TestWithParam<int> {};

TEST_P(ElasticExecutorTasksTest, TasksThatWaitForEachOtherAllComplete) {
  ElasticExecutor executor;
  const int n = GetParam();
  EXPECT_EQ(RunWaitingTasks(executor, n), n);
  EXPECT_EQ(executor.stats().started, n);
}

TEST_P(ElasticExecutorTasksTest, SteadyStateReusesIdleThreads) {
  ElasticExecutor executor;
  const int n = GetParam();
  for (int round = 0; round < 5; ++round) {
    WaitUntilAllIdle(executor);
    ASSERT_EQ(RunWaitingTasks(executor, n), n) << "round " << round;
  }
  EXPECT_EQ(executor.stats().started, n) << "only the first round starts threads";
}

INSTANTIATE_TEST_SUITE_P(Tasks, ElasticExecutorTasksTest, ::testing::Values(1, 8, 64));

TEST(ElasticExecutorTest, IdleThreadsExit) {
  ElasticExecutor::Options options;
  options.idle_timeout = absl::Milliseconds(20);
  ElasticExecutor executor(options);
  EXPECT_EQ(RunWaitingTasks(executor, 4), 4);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (executor.stats().threads > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(executor.stats().threads, 0);
  // It still runs tasks afterwards (and joins the exited threads).
  EXPECT_EQ(RunWaitingTasks(executor, 3), 3);
  EXPECT_EQ(executor.stats().started, 7);
}

TEST(ElasticExecutorTest, TasksMayScheduleTasks) {
  ElasticExecutor executor;
  absl::BlockingCounter done(2);
  executor.Schedule([&] {
    executor.Schedule([&] { done.DecrementCount(); });
    done.DecrementCount();
  });
  done.Wait();
}

TEST(ElasticExecutorTest, DestructorWaitsForRunningTasks) {
  std::atomic<int> finished{0};
  {
    ElasticExecutor executor;
    for (int i = 0; i < 4; ++i) {
      executor.Schedule([&] {
        absl::SleepFor(absl::Milliseconds(50));
        ++finished;
      });
    }
  }
  EXPECT_EQ(finished, 4);
}

TEST(ElasticExecutorTest, SharedIsOneInstance) {
  EXPECT_EQ(&ElasticExecutor::Shared(), &ElasticExecutor::Shared());
  absl::BlockingCounter done(1);
  ElasticExecutor::Shared().Schedule([&] { done.DecrementCount(); });
  done.Wait();
}

}  // namespace
}  // namespace meshserve
