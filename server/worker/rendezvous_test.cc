#include "server/worker/rendezvous.h"

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

absl::Time Soon() { return absl::Now() + absl::Seconds(5); }

MATCHER_P(Bytes, bytes, "holds the bytes") { return arg.bytes == bytes; }

TEST(RendezvousTest, ChunksAreAssembledInOrder) {
  Rendezvous r;
  ASSERT_OK(r.StartRequest("q"));
  EXPECT_OK(r.DeliverChunk("q", "t", 6, 0, "abc", 1));
  EXPECT_OK(r.DeliverChunk("q", "t", 6, 3, "def", 1));
  EXPECT_THAT(r.Receive("q", "t", 1, Soon()), IsOkAndHolds(Bytes(std::string("abcdef"))));
  EXPECT_EQ(r.NumPendingSlices(), 0);
}

TEST(RendezvousTest, ReceiveWaitsForALaterDelivery) {
  Rendezvous r;
  ASSERT_OK(r.StartRequest("q"));
  std::thread sender([&]() {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_OK(r.DeliverSlice("q", "t", "xyz", 2));
  });
  EXPECT_THAT(r.Receive("q", "t", 2, Soon()), IsOkAndHolds(Bytes(std::string("xyz"))));
  sender.join();
}

TEST(RendezvousTest, TheSendersDTypeIsPassedThrough) {
  Rendezvous r;
  EXPECT_OK(r.DeliverChunk("q", "t", 2, 0, "ab", 1, /*dtype=*/2));
  absl::StatusOr<Rendezvous::Received> got = r.Receive("q", "t", 1, Soon());
  ASSERT_OK(got.status());
  EXPECT_EQ(got->dtype, 2);
}

TEST(RendezvousTest, SlicesArrivingBeforeTheRequestStartsAreKept) {
  Rendezvous r;
  EXPECT_OK(r.DeliverSlice("q", "t", "early", 2));
  ASSERT_OK(r.StartRequest("q"));
  EXPECT_THAT(r.Receive("q", "t", 2, Soon()), IsOkAndHolds(Bytes(std::string("early"))));
}

TEST(RendezvousTest, BadChunksAreRejectedAndPoisonTheSlice) {
  Rendezvous r;
  EXPECT_THAT(r.DeliverChunk("q", "neg", -1, 0, "", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "total_bytes -1"));
  EXPECT_THAT(r.DeliverChunk("q", "gap", 6, 3, "abc", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset 3 but 0 bytes"));
  EXPECT_THAT(r.Receive("q", "gap", 1, Soon()),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset 3"));
  EXPECT_THAT(r.DeliverChunk("q", "over", 4, 0, "abcdef", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "overruns total_bytes 4"));
  EXPECT_OK(r.DeliverChunk("q", "tot", 4, 0, "ab", 1));
  EXPECT_THAT(r.DeliverChunk("q", "tot", 8, 2, "cd", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "total_bytes 8"));
  EXPECT_OK(r.DeliverSlice("q", "dup", "a", 1));
  EXPECT_THAT(r.DeliverSlice("q", "dup", "b", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "second slice"));
}

TEST(RendezvousTest, DeadlineExceededNamesTheSourceAndProgress) {
  Rendezvous r;
  ASSERT_OK(r.StartRequest("q"));
  EXPECT_OK(r.DeliverChunk("q", "t", 10, 0, "abc", 7));
  EXPECT_THAT(r.Receive("q", "t", 7, absl::Now() + absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "3 of 10 bytes"));
}

TEST(RendezvousTest, CancelFailsPendingAndFutureReceivesAndDropsLateChunks) {
  Rendezvous r;
  ASSERT_OK(r.StartRequest("q"));
  std::thread canceller([&]() {
    absl::SleepFor(absl::Milliseconds(50));
    r.Cancel("q", "peer died");
  });
  EXPECT_THAT(r.Receive("q", "t", 1, Soon()), StatusIs(absl::StatusCode::kAborted, "peer died"));
  canceller.join();
  EXPECT_OK(r.DeliverSlice("q", "late", "x", 1));  // dropped
  EXPECT_EQ(r.NumPendingSlices(), 0);
  r.Cancel("p", "before start");
  EXPECT_THAT(r.StartRequest("p"), StatusIs(absl::StatusCode::kAborted, "before start"));
}

TEST(RendezvousTest, FinishedRequestsDropLateChunksAndCannotRestart) {
  Rendezvous r;
  ASSERT_OK(r.StartRequest("q"));
  EXPECT_THAT(r.StartRequest("q"), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_OK(r.DeliverSlice("q", "unused", "x", 1));
  r.FinishRequest("q");
  EXPECT_EQ(r.NumPendingSlices(), 0);
  EXPECT_OK(r.DeliverSlice("q", "late", "x", 1));
  EXPECT_EQ(r.NumPendingSlices(), 0);
  EXPECT_THAT(r.StartRequest("q"), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(RendezvousTest, OrphanSlicesAreCollected) {
  Rendezvous::Options options;
  options.orphan_ttl = absl::Milliseconds(20);
  Rendezvous r(options);
  EXPECT_OK(r.DeliverSlice("never-started", "t", "x", 1));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_OK(r.DeliverSlice("other", "t", "y", 1));  // triggers collection
  EXPECT_EQ(r.NumPendingSlices(), 1);
}

}  // namespace
}  // namespace meshserve
