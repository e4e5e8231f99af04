#include "server/worker/rendezvous.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
  EXPECT_OK(r.DeliverChunk("q", "t", 2, 0, "ab", 1, DType::kBFloat16));
  absl::StatusOr<Rendezvous::Received> got = r.Receive("q", "t", 1, Soon());
  ASSERT_OK(got.status());
  EXPECT_EQ(got->dtype, DType::kBFloat16);
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

Rendezvous::Options Budget(int64_t bytes) {
  Rendezvous::Options options;
  options.max_inflight_slice_bytes = bytes;
  return options;
}

TEST(RendezvousBudgetTest, ASliceOverTheBudgetIsRefusedNamingTheRequestAndTheFlag) {
  Rendezvous r(Budget(10));
  ASSERT_OK(r.StartRequest("q"));
  EXPECT_OK(r.DeliverChunk("q", "a", 6, 0, "abc", 1));  // 6 bytes held from the 1st chunk
  EXPECT_EQ(r.InflightSliceBytes(), 6);
  EXPECT_THAT(r.DeliverChunk("q", "b", 5, 0, "ab", 2),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "request 'q' tag 'b' from worker 2: a slice of 5 bytes does not fit: 6 "
                       "of this worker's 10 bytes for slices in flight are in use "
                       "(--max_inflight_slice_bytes=10)"));
  EXPECT_EQ(r.InflightSliceBytes(), 6);
  // Its later chunks are refused too, and its Receive fails at once (no deadline wait).
  EXPECT_THAT(r.DeliverChunk("q", "b", 5, 2, "cde", 2),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r.Receive("q", "b", 2, absl::InfiniteFuture()),
              StatusIs(absl::StatusCode::kResourceExhausted, "5 bytes"));
  EXPECT_THAT(r.DeliverSlice("q", "c", std::string(11, 'x'), 3),
              StatusIs(absl::StatusCode::kResourceExhausted, "a slice of 11 bytes"));
  // What fits is still served, and a Receive gives its bytes back to the budget.
  EXPECT_OK(r.DeliverSlice("q", "d", "wxyz", 3));
  EXPECT_EQ(r.InflightSliceBytes(), 10);
  EXPECT_OK(r.DeliverChunk("q", "a", 6, 3, "def", 1));
  EXPECT_THAT(r.Receive("q", "a", 1, Soon()), IsOkAndHolds(Bytes(std::string("abcdef"))));
  EXPECT_EQ(r.InflightSliceBytes(), 4);
  EXPECT_THAT(r.Receive("q", "d", 3, Soon()), IsOkAndHolds(Bytes(std::string("wxyz"))));
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  r.FinishRequest("q");
  EXPECT_EQ(r.NumPendingSlices(), 0);
}

TEST(RendezvousBudgetTest, FinishCancelPoisonAndOrphansReleaseTheBudget) {
  Rendezvous::Options options = Budget(8);
  options.orphan_ttl = absl::Milliseconds(20);
  Rendezvous r(options);
  ASSERT_OK(r.StartRequest("finished"));
  EXPECT_OK(r.DeliverChunk("finished", "t", 8, 0, "ab", 1));  // partial, never received
  EXPECT_THAT(r.DeliverSlice("next", "t", "x", 1), StatusIs(absl::StatusCode::kResourceExhausted));
  r.FinishRequest("finished");
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  EXPECT_OK(r.DeliverSlice("cancelled", "t", std::string(8, 'c'), 1));  // before it starts
  r.Cancel("cancelled", "peer died");
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  EXPECT_OK(r.DeliverChunk("poisoned", "t", 8, 0, "ab", 1));
  EXPECT_THAT(r.DeliverChunk("poisoned", "t", 8, 5, "cd", 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  EXPECT_OK(r.DeliverSlice("orphan", "t", std::string(8, 'o'), 1));
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_OK(r.StartRequest("served"));  // creating its entry collects the orphan
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  EXPECT_OK(r.DeliverSlice("served", "t", "12345678", 1));
  EXPECT_THAT(r.Receive("served", "t", 1, Soon()), IsOkAndHolds(Bytes(std::string("12345678"))));
  r.FinishRequest("served");
  EXPECT_EQ(r.InflightSliceBytes(), 0);
}

// Requests on many threads share the budget: every slice is either received
// whole or refused with kResourceExhausted; the bytes held never exceed the
// budget and all of it is free again once the requests end.
TEST(RendezvousBudgetTest, ConcurrentRequestsShareTheBudget) {
  constexpr int64_t kBudget = 64, kSlice = 16;
  constexpr int kThreads = 8, kRequests = 200;
  Rendezvous r(Budget(kBudget));
  std::vector<int> received(kThreads, 0), refused(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRequests; ++i) {
        const std::string id = absl::StrCat("t", t, "-", i);
        const std::string bytes(kSlice, static_cast<char>('a' + t));
        ASSERT_OK(r.StartRequest(id));
        absl::Status sent = r.DeliverChunk(id, "x", kSlice, 0, bytes.substr(0, 8), 1);
        if (sent.ok()) sent = r.DeliverChunk(id, "x", kSlice, 8, bytes.substr(8), 1);
        EXPECT_LE(r.InflightSliceBytes(), kBudget);
        absl::StatusOr<Rendezvous::Received> got = r.Receive(id, "x", 1, Soon());
        if (sent.ok()) {
          EXPECT_THAT(got, IsOkAndHolds(Bytes(bytes)));
          ++received[t];
        } else {
          EXPECT_THAT(sent, StatusIs(absl::StatusCode::kResourceExhausted));
          EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kResourceExhausted));
          ++refused[t];
        }
        if (i % 2 == 0) {
          r.FinishRequest(id);
        } else {
          r.Cancel(id, "done");
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int total_received = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(received[t] + refused[t], kRequests);
    total_received += received[t];
  }
  EXPECT_GT(total_received, 0);
  EXPECT_EQ(r.InflightSliceBytes(), 0);
  EXPECT_EQ(r.NumPendingSlices(), 0);
}

TEST(RendezvousBudgetTest, ValidateOptionsNamesTheBadValue) {
  EXPECT_OK(Rendezvous::ValidateOptions(Rendezvous::Options()));
  EXPECT_THAT(Rendezvous::ValidateOptions(Budget(0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "max_inflight_slice_bytes must be at least 1, got 0"));
  EXPECT_THAT(Rendezvous::ValidateOptions(Budget(-5)),
              StatusIs(absl::StatusCode::kInvalidArgument, "got -5"));
}

}  // namespace
}  // namespace meshserve
