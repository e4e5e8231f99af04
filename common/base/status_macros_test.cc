#include "common/base/status_macros.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd value ", x);
  return x / 2;
}

absl::Status CheckEven(int x) {
  MS_RETURN_IF_ERROR(Half(x).status(), "checking ", x);
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  MS_ASSIGN_OR_RETURN(int half, Half(x));
  MS_ASSIGN_OR_RETURN(int quarter, Half(half), "second halving");
  return quarter;
}

TEST(StatusMacrosTest, ReturnIfErrorPassesOk) { EXPECT_THAT(CheckEven(4), IsOk()); }

TEST(StatusMacrosTest, ReturnIfErrorAddsPrefixAndKeepsCode) {
  absl::Status status = CheckEven(3);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               "checking 3: odd value 3"));
}

TEST(StatusMacrosTest, AssignOrReturnAssignsAndPropagates) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(3), StatusIs(absl::StatusCode::kInvalidArgument, "odd value 3"));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "second halving: odd value 3"));
}

}  // namespace
}  // namespace meshserve
