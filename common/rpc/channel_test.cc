#include "common/rpc/channel.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

TEST(ChannelTest, ValidateTargetAcceptsHostPort) {
  EXPECT_OK(ValidateTarget("localhost:50051"));
  EXPECT_OK(ValidateTarget("127.0.0.1:1"));
  EXPECT_OK(ValidateTarget("[::1]:8080"));
}

TEST(ChannelTest, ValidateTargetRejectsBadTargetsNamingThem) {
  EXPECT_THAT(ValidateTarget(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateTarget("localhost"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'localhost'"));
  EXPECT_THAT(ValidateTarget("host:"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'host:'"));
  EXPECT_THAT(ValidateTarget("host:abc"),
              StatusIs(absl::StatusCode::kInvalidArgument, "port 'abc'"));
  EXPECT_THAT(ValidateTarget("host:70000"),
              StatusIs(absl::StatusCode::kInvalidArgument, "70000"));
  EXPECT_THAT(ValidateTarget(":80"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChannelTest, CreateChannelRejectsBadTarget) {
  EXPECT_THAT(CreateChannel("nope"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel("127.0.0.1:1"));
  EXPECT_NE(channel, nullptr);
}

TEST(ChannelTest, ArgumentsRaiseLimitsAndLowerBackoff) {
  grpc::ChannelArguments owner = MakeChannelArguments();
  grpc_channel_args args = owner.c_channel_args();
  int found = 0;
  for (size_t i = 0; i < args.num_args; ++i) {
    const std::string key = args.args[i].key;
    if (key == GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH ||
        key == GRPC_ARG_MAX_SEND_MESSAGE_LENGTH) {
      EXPECT_EQ(args.args[i].value.integer, 1 << 30) << key;
      ++found;
    }
    if (key == GRPC_ARG_MAX_RECONNECT_BACKOFF_MS) {
      EXPECT_LE(args.args[i].value.integer, 500);
      ++found;
    }
    if (key == GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS ||
        key == GRPC_ARG_MIN_RECONNECT_BACKOFF_MS) {
      EXPECT_LE(args.args[i].value.integer, 500);
      ++found;
    }
  }
  EXPECT_EQ(found, 5);
}

TEST(ChannelTest, DeadlineHelpers) {
  grpc::ClientContext none;
  EXPECT_EQ(TimeLeft(none), absl::InfiniteDuration());
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  absl::Duration left = TimeLeft(context);
  EXPECT_GT(left, absl::Seconds(9));
  EXPECT_LE(left, absl::Seconds(10));
  EXPECT_EQ(TimeLeftUntil(DeadlineFromNow(absl::ZeroDuration())),
            absl::InfiniteDuration());
  EXPECT_EQ(TimeLeftUntil(std::chrono::system_clock::now() - std::chrono::seconds(1)),
            absl::ZeroDuration());
}

}  // namespace
}  // namespace meshserve
