// gMock matchers for absl::Status and absl::StatusOr (abseil 20220623 has none).
//
//   EXPECT_THAT(Foo(), IsOk());
//   EXPECT_THAT(Foo(), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(Foo(), StatusIs(absl::StatusCode::kInvalidArgument, "axis 'x'"));
//   EXPECT_THAT(Bar(), IsOkAndHolds(42));
//   ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create(...));
#ifndef MESHSERVE_TESTS_TESTING_STATUS_MATCHERS_H_
#define MESHSERVE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace testing {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = ::meshserve::testing::GetStatus(arg);
  if (!status.ok()) *result_listener << "status is " << status;
  return status.ok();
}

MATCHER_P(StatusIs, code,
          std::string("has code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = ::meshserve::testing::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code;
}

MATCHER_P2(StatusIs, code, substr,
           std::string("has code ") + absl::StatusCodeToString(code) +
               " and a message containing \"" + std::string(substr) + "\"") {
  const absl::Status& status = ::meshserve::testing::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code &&
         std::string(status.message()).find(substr) != std::string::npos;
}

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace testing
}  // namespace meshserve

#define MS_TESTING_CONCAT_INNER_(x, y) x##y
#define MS_TESTING_CONCAT_(x, y) MS_TESTING_CONCAT_INNER_(x, y)

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(MS_TESTING_CONCAT_(ms_statusor_, __LINE__), lhs, rexpr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr)          \
  auto statusor = (rexpr);                                        \
  ASSERT_TRUE(statusor.ok()) << "status is " << statusor.status(); \
  lhs = std::move(statusor).value()

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::meshserve::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::meshserve::testing::IsOk())

#endif  // MESHSERVE_TESTS_TESTING_STATUS_MATCHERS_H_
