// The op table: every op's name parses back to it, unknown names are rejected
// with the name in the message.
#include "common/program/compute_op.h"

#include <sstream>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

TEST(ComputeOpTest, EveryNameParsesBackToItsOp) {
#define MS_CHECK_OP(enumerator, name, arity)                                   \
  EXPECT_EQ(ComputeOpName(ComputeOp::enumerator), name);                      \
  EXPECT_THAT(ParseComputeOp(name), IsOkAndHolds(ComputeOp::enumerator));      \
  EXPECT_EQ(ComputeOpArity(ComputeOp::enumerator), arity);
  MS_COMPUTE_OP_LIST(MS_CHECK_OP)
#undef MS_CHECK_OP
}

TEST(ComputeOpTest, AritiesOfTheOddOps) {
  EXPECT_EQ(ComputeOpArity(ComputeOp::kZeros), 0);
  EXPECT_EQ(ComputeOpArity(ComputeOp::kLayerNorm), 3);
  EXPECT_EQ(ComputeOpArity(ComputeOp::kEmbed), 2);
  EXPECT_EQ(ComputeOpArity(ComputeOp::kSoftmax), 1);
}

TEST(ComputeOpTest, UnknownNameIsInvalidArgumentNamingIt) {
  EXPECT_THAT(ParseComputeOp("conv"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown compute op 'conv'"));
  EXPECT_THAT(ParseComputeOp(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ComputeOpTest, PrintsItsName) {
  std::ostringstream os;
  os << ComputeOp::kRmsNorm;
  EXPECT_EQ(os.str(), "rms_norm");
}

}  // namespace
}  // namespace meshserve
