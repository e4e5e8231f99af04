#include "common/base/dtype.h"

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(DTypeShortName(DType::kFloat32), "f32");
  EXPECT_EQ(DTypeWireName(DType::kInt32), "INT32");
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8);
}

TEST(DTypeTest, ParseAcceptsEveryNaming) {
  EXPECT_THAT(ParseDType("float32"), IsOkAndHolds(DType::kFloat32));
  EXPECT_THAT(ParseDType("bf16"), IsOkAndHolds(DType::kBFloat16));
  EXPECT_THAT(ParseDType("FP32"), IsOkAndHolds(DType::kFloat32));
  EXPECT_THAT(ParseDType("BF16"), IsOkAndHolds(DType::kBFloat16));
  EXPECT_THAT(ParseDType("I32"), IsOkAndHolds(DType::kInt32));
}

TEST(DTypeTest, ParseRejectsUnknownNamingIt) {
  EXPECT_THAT(ParseDType("float33"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'float33'"));
}

}  // namespace
}  // namespace meshserve
