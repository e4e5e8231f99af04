#include "server/coordinator/request_limits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

InferRequest RequestWithShape(std::vector<int64_t> shape, size_t bytes = 0) {
  InferRequest r;
  r.model = "linear";
  NamedTensor in;
  in.name = "x";
  in.shape = std::move(shape);
  in.bytes.assign(bytes, '\0');
  r.inputs.push_back(std::move(in));
  return r;
}

TEST(RequestLimitsTest, AdmitsUpToTheLimitAndNamesTheExcess) {
  RequestLimits limits;
  limits.max_tensor_elements = 64;
  limits.max_request_bytes = 1000;
  EXPECT_OK(CheckRequestLimits(RequestWithShape({8, 8}, 256), limits));
  EXPECT_THAT(CheckRequestLimits(RequestWithShape({8, 9}), limits),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "model 'linear' input 'x': 72 elements (shape [8, 9]) exceed "
                       "--max_tensor_elements=64"));
  EXPECT_THAT(CheckRequestLimits(RequestWithShape({2}, 1001), limits),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "1001 bytes exceed --max_request_bytes=1000"));
}

TEST(RequestLimitsTest, OverflowingShapeIsOverTheLimit) {
  EXPECT_THAT(CheckRequestLimits(RequestWithShape({int64_t{1} << 40, int64_t{1} << 40}),
                                 RequestLimits()),
              StatusIs(absl::StatusCode::kResourceExhausted, "more than 2^63"));
}

TEST(RequestLimitsTest, ValidateRejectsNonPositiveLimits) {
  EXPECT_OK(ValidateRequestLimits(RequestLimits()));
  RequestLimits bad;
  bad.max_request_bytes = 0;
  EXPECT_THAT(ValidateRequestLimits(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, "--max_request_bytes=0"));
  bad = RequestLimits();
  bad.max_tensor_elements = -1;
  EXPECT_THAT(ValidateRequestLimits(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, "--max_tensor_elements=-1"));
}

}  // namespace
}  // namespace meshserve
