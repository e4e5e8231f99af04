#include "common/rpc/grpc_status.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

using ::testing::HasSubstr;

TEST(GrpcStatusTest, OkRoundTrips) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_OK(FromGrpcStatus(grpc::Status::OK));
}

TEST(GrpcStatusTest, EveryCodeRoundTripsWithMessage) {
  for (int code = 1; code <= 16; ++code) {
    absl::Status status(static_cast<absl::StatusCode>(code), "model 'x' broke");
    grpc::Status wire = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "model 'x' broke");
    EXPECT_EQ(FromGrpcStatus(wire), status);
  }
}

TEST(GrpcStatusTest, LongMessagesAreTruncated) {
  std::string long_message(kMaxGrpcStatusMessageBytes + 1000, 'a');
  grpc::Status wire = ToGrpcStatus(absl::InvalidArgumentError(long_message));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(wire.error_message().size(), kMaxGrpcStatusMessageBytes + 100);
  EXPECT_THAT(wire.error_message(), HasSubstr("[truncated 1000 bytes]"));
}

TEST(GrpcStatusTest, UnknownWireCodeBecomesUnknown) {
  grpc::Status wire(static_cast<grpc::StatusCode>(99), "odd");
  EXPECT_THAT(FromGrpcStatus(wire),
              StatusIs(absl::StatusCode::kUnknown, "grpc code 99: odd"));
}

}  // namespace
}  // namespace meshserve
