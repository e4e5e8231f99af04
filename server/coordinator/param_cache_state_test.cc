#include "server/coordinator/param_cache_state.h"

#include "gtest/gtest.h"

namespace meshserve {
namespace {

CompiledPlan Plan(const std::string& id, int64_t kept_bytes) {
  CompiledPlan plan;
  plan.program_id = id;
  plan.kept_param_bytes = kept_bytes;
  return plan;
}

TEST(ParamCacheStateTest, FillsOncePerVersionThenUses) {
  ParamCacheState state(1000);
  const CompiledPlan plan = Plan("p", 400);
  EXPECT_EQ(state.ModeFor(plan, 1), ParamCacheMode::kFill);
  // A failed fill keeps nothing: the next request fills again.
  EXPECT_FALSE(state.Ran(plan, 1, ParamCacheMode::kFill, absl::UnavailableError("lost")));
  EXPECT_EQ(state.ModeFor(plan, 1), ParamCacheMode::kFill);
  EXPECT_FALSE(state.Ran(plan, 1, ParamCacheMode::kFill, absl::OkStatus()));
  EXPECT_EQ(state.ModeFor(plan, 1), ParamCacheMode::kUse);
  EXPECT_EQ(state.ModeFor(plan, 2), ParamCacheMode::kFill);  // a pushed version
  EXPECT_EQ(state.ModeFor(Plan("q", 400), 1), ParamCacheMode::kFill);
}

TEST(ParamCacheStateTest, AUseAWorkerRefusesIsRunAgainAsAFill) {
  ParamCacheState state(1000);
  const CompiledPlan plan = Plan("p", 400);
  state.Ran(plan, 3, ParamCacheMode::kFill, absl::OkStatus());
  // Other errors of a kUse run leave the state alone.
  EXPECT_FALSE(state.Ran(plan, 3, ParamCacheMode::kUse, absl::InvalidArgumentError("bad")));
  EXPECT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kUse);
  EXPECT_TRUE(state.Ran(plan, 3, ParamCacheMode::kUse,
                        absl::FailedPreconditionError("nothing kept")));
  EXPECT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kFill);
}

TEST(ParamCacheStateTest, OffWithoutKeptBytesOverTheBudgetOrWithoutAVersion) {
  ParamCacheState state(1000);
  EXPECT_EQ(state.ModeFor(Plan("none", 0), 1), ParamCacheMode::kOff);
  EXPECT_EQ(state.ModeFor(Plan("big", 1001), 1), ParamCacheMode::kOff);
  EXPECT_EQ(state.ModeFor(Plan("fits", 1000), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.ModeFor(Plan("fits", 1000), 0), ParamCacheMode::kOff);
  EXPECT_EQ(ParamCacheState(0).ModeFor(Plan("fits", 1), 1), ParamCacheMode::kOff);
  EXPECT_FALSE(state.Ran(Plan("big", 1001), 1, ParamCacheMode::kOff,
                         absl::FailedPreconditionError("x")));
}

}  // namespace
}  // namespace meshserve
