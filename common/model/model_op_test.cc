#include "common/model/model_op.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(ModelOpTest, NamesRoundTrip) {
#define MESHSERVE_MODEL_OP_ROUND_TRIP(e, name, arity, flags) \
  EXPECT_EQ(ModelOpFromName(ModelOpName(ModelOp::e)), ModelOp::e) << name;
  MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_ROUND_TRIP)
#undef MESHSERVE_MODEL_OP_ROUND_TRIP
}

TEST(ModelOpTest, UnknownNameIsNullopt) {
  EXPECT_EQ(ModelOpFromName("lineer"), std::nullopt);
  EXPECT_EQ(ModelOpFromName(""), std::nullopt);
}

TEST(ModelOpTest, ArityAndOutSharding) {
  EXPECT_EQ(ModelOpArityOf(ModelOp::kEinsum), ModelOpArity::kBinary);
  EXPECT_EQ(ModelOpArityOf(ModelOp::kMul), ModelOpArity::kBinary);
  EXPECT_EQ(ModelOpArityOf(ModelOp::kSilu), ModelOpArity::kUnary);
  EXPECT_EQ(ModelOpName(ModelOp::kRmsNorm), "rms_norm");
  EXPECT_TRUE(ModelOpTakesOutSharding(ModelOp::kLinear));
  EXPECT_TRUE(ModelOpTakesOutSharding(ModelOp::kReshard));
  EXPECT_FALSE(ModelOpTakesOutSharding(ModelOp::kSoftmax));
}

TEST(ModelOpTest, OnlyLinearAndEinsumAreDots) {
  int dots = 0;
#define MESHSERVE_MODEL_OP_COUNT_DOTS(e, name, arity, flags) \
  if (ModelOpIsDot(ModelOp::e)) ++dots;
  MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_COUNT_DOTS)
#undef MESHSERVE_MODEL_OP_COUNT_DOTS
  EXPECT_EQ(dots, 2);
  EXPECT_TRUE(ModelOpIsDot(ModelOp::kLinear));
  EXPECT_TRUE(ModelOpIsDot(ModelOp::kEinsum));
  EXPECT_FALSE(ModelOpIsDot(ModelOp::kEmbed));
  EXPECT_TRUE(ModelOpTakesOutSharding(ModelOp::kEinsum));
}

}  // namespace
}  // namespace meshserve
