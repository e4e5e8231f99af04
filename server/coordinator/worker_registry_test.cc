#include "server/coordinator/worker_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

TEST(WorkerRegistryTest, RegisterKeepsIdsAndExpiresSilentWorkers) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_OK_AND_ASSIGN(int64_t a, r.Register("h:1", 1, 0, -1, t0));
  ASSERT_OK_AND_ASSIGN(int64_t b, r.Register("h:2", 1, 0, -1, t0));
  EXPECT_NE(a, b);
  ASSERT_OK_AND_ASSIGN(int64_t again, r.Register("h:1", 1, 0, a, t0));
  EXPECT_EQ(again, a);
  EXPECT_THAT(r.Register("", 1, 0, -1, t0), StatusIs(absl::StatusCode::kInvalidArgument));
  const int64_t epoch = r.epoch();
  EXPECT_TRUE(r.Heartbeat(a, false, t0 + absl::Milliseconds(250)));
  EXPECT_TRUE(r.ExpireDead(t0 + absl::Milliseconds(299)).empty());
  EXPECT_THAT(r.ExpireDead(t0 + absl::Milliseconds(301)), ElementsAre(b));
  EXPECT_GT(r.epoch(), epoch);
  EXPECT_FALSE(r.IsAlive(b));
  EXPECT_EQ(r.PlaceableWorkers().size(), 1u);
  EXPECT_FALSE(r.Heartbeat(99, false, t0));
  // A coordinator restart: an unknown previous id is adopted.
  ASSERT_OK_AND_ASSIGN(int64_t adopted, r.Register("h:9", 1, 0, 42, t0));
  EXPECT_EQ(adopted, 42);
}

TEST(WorkerRegistryTest, ReturningWorkersAndTheLastRegistration) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_EQ(r.LastRegistration(), absl::InfinitePast());
  ASSERT_OK_AND_ASSIGN(int64_t fresh, r.Register("h:1", 1, 0, -1, t0));
  EXPECT_FALSE(r.AnyReturning());
  EXPECT_FALSE(r.Get(fresh)->returning);
  ASSERT_OK_AND_ASSIGN(int64_t back, r.Register("h:2", 1, 0, 7, t0 + absl::Milliseconds(20)));
  EXPECT_EQ(back, 7);
  EXPECT_TRUE(r.Get(back)->returning);
  EXPECT_TRUE(r.AnyReturning());
  EXPECT_EQ(r.LastRegistration(), t0 + absl::Milliseconds(20));
  // Dead workers count for neither.
  r.MarkDead(back);
  EXPECT_FALSE(r.AnyReturning());
  EXPECT_EQ(r.LastRegistration(), t0);
}

TEST(WorkerRegistryTest, ForgetDeadDropsOnlyLongDeadUnusedWorkers) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_OK_AND_ASSIGN(int64_t a, r.Register("h:1", 1, 0, -1, t0));
  ASSERT_OK_AND_ASSIGN(int64_t b, r.Register("h:2", 1, 0, -1, t0));
  ASSERT_OK_AND_ASSIGN(int64_t c, r.Register("h:3", 1, 0, -1, t0));
  const absl::Time t1 = t0 + absl::Seconds(1);
  r.Heartbeat(a, false, t1);
  EXPECT_THAT(r.ExpireDead(t1), ElementsAre(b, c));
  const int64_t epoch = r.epoch();
  auto uses_c = [c](int64_t id) { return id == c; };
  EXPECT_TRUE(r.ForgetDead(t0 + absl::Seconds(10), absl::Seconds(10), uses_c).empty())
      << "not dead for long enough";
  EXPECT_THAT(r.ForgetDead(t0 + absl::Seconds(11), absl::Seconds(10), uses_c), ElementsAre(b));
  EXPECT_EQ(r.AllWorkers().size(), 2u);
  EXPECT_EQ(r.epoch(), epoch);
  EXPECT_TRUE(r.ForgetDead(t0 + absl::Seconds(60), absl::Seconds(10), uses_c).empty())
      << "c is still in a placement; a is alive";
  EXPECT_FALSE(r.Heartbeat(b, false, t1)) << "a forgotten worker must register again";
  ASSERT_OK_AND_ASSIGN(int64_t b2, r.Register("h:2", 1, 0, b, t1));
  EXPECT_EQ(b2, b);
}

TEST(WorkerRegistryTest, DrainingAndSuspects) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  const absl::Time t0 = absl::Now();
  ASSERT_OK_AND_ASSIGN(int64_t a, r.Register("h:1", 1, 0, -1, t0));
  r.Heartbeat(a, /*draining=*/true, t0);
  EXPECT_TRUE(r.PlaceableWorkers().empty());
  EXPECT_TRUE(r.IsAlive(a));
  EXPECT_TRUE(r.MarkSuspect(a));
  EXPECT_THAT(r.SuspectWorkers(), ElementsAre(a));
  r.MarkDead(a);
  EXPECT_FALSE(r.IsAlive(a));
  EXPECT_TRUE(r.SuspectWorkers().empty());
  EXPECT_FALSE(r.MarkSuspect(a));  // dead: nothing to probe
  EXPECT_FALSE(r.MarkSuspect(99));
}

TEST(WorkerRegistryTest, WarmingWorkerIsNotPlaceableUntilWarm) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  r.set_warmup_wait(absl::Seconds(2));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_OK_AND_ASSIGN(int64_t a, r.Register("h:1", 1, 0, -1, t0));
  ASSERT_OK_AND_ASSIGN(int64_t b, r.Register("h:2", 1, 0, -1, t0, /*warming=*/true));
  auto placeable_ids = [&r] {
    std::vector<int64_t> ids;
    for (const WorkerInfo& w : r.PlaceableWorkers()) ids.push_back(w.worker_id);
    return ids;
  };
  EXPECT_THAT(placeable_ids(), ElementsAre(a));
  EXPECT_EQ(r.NumJoinedWorkers(), 2);
  EXPECT_TRUE(r.IsAlive(b));
  ASSERT_OK_AND_ASSIGN(WorkerInfo info, r.Get(b));
  EXPECT_TRUE(info.warming);
  // Heartbeats that do not say warm keep it out; the one that does lets it in
  // and bumps the epoch (the control loop re-places).
  const int64_t epoch = r.epoch();
  EXPECT_TRUE(r.Heartbeat(b, false, t0 + absl::Milliseconds(50)));
  EXPECT_TRUE(r.ExpireDead(t0 + absl::Milliseconds(60)).empty());
  EXPECT_THAT(placeable_ids(), ElementsAre(a));
  EXPECT_EQ(r.epoch(), epoch);
  EXPECT_TRUE(r.Heartbeat(b, false, t0 + absl::Milliseconds(100), /*warm=*/true));
  EXPECT_THAT(placeable_ids(), ElementsAre(a, b));
  EXPECT_GT(r.epoch(), epoch);
  ASSERT_OK_AND_ASSIGN(info, r.Get(b));
  EXPECT_FALSE(info.warming);
  // A later warm heartbeat changes nothing.
  const int64_t epoch2 = r.epoch();
  EXPECT_TRUE(r.Heartbeat(b, false, t0 + absl::Milliseconds(150), /*warm=*/true));
  EXPECT_EQ(r.epoch(), epoch2);
}

TEST(WorkerRegistryTest, WorkerThatNeverSaysWarmIsPlacedAfterTheBound) {
  WorkerRegistry r(absl::Milliseconds(100), 3);
  r.set_warmup_wait(absl::Seconds(2));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_OK_AND_ASSIGN(int64_t a, r.Register("h:1", 1, 0, -1, t0, /*warming=*/true));
  EXPECT_TRUE(r.PlaceableWorkers().empty());
  const int64_t epoch = r.epoch();
  for (int i = 1; i <= 19; ++i) {  // beats (not warm) every 100 ms up to 1.9 s
    const absl::Time now = t0 + absl::Milliseconds(100 * i);
    EXPECT_TRUE(r.Heartbeat(a, false, now));
    EXPECT_TRUE(r.ExpireDead(now).empty());
  }
  EXPECT_TRUE(r.PlaceableWorkers().empty());
  EXPECT_EQ(r.epoch(), epoch);
  EXPECT_TRUE(r.Heartbeat(a, false, t0 + absl::Seconds(2)));
  EXPECT_TRUE(r.ExpireDead(t0 + absl::Seconds(2)).empty());
  ASSERT_EQ(r.PlaceableWorkers().size(), 1u);
  EXPECT_EQ(r.PlaceableWorkers()[0].worker_id, a);
  EXPECT_GT(r.epoch(), epoch);
  // Registering again without warming (an old worker, or a re-registration)
  // is placeable at once.
  ASSERT_OK_AND_ASSIGN(int64_t b, r.Register("h:2", 1, 0, -1, t0 + absl::Seconds(3)));
  EXPECT_EQ(r.PlaceableWorkers().size(), 2u);
  EXPECT_EQ(r.PlaceableWorkers()[1].worker_id, b);
}

}  // namespace
}  // namespace meshserve
