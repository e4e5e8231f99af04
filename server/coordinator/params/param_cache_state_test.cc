#include "server/coordinator/params/param_cache_state.h"

#include "gtest/gtest.h"

namespace meshserve {
namespace {

CompiledPlan Plan(const std::string& id, int64_t kept_bytes, const std::string& model = "m",
                  int64_t generation = 1) {
  CompiledPlan plan;
  plan.program_id = id;
  plan.generation = generation;
  plan.kept_param_bytes = kept_bytes;
  plan.programs[0].model = model;
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
  EXPECT_EQ(state.counted_bytes(), 400);                     // counted once
  EXPECT_EQ(state.ModeFor(Plan("q", 400), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.counted_bytes(), 800);
}

TEST(ParamCacheStateTest, AUseAWorkerRefusesIsRunAgainAsAFill) {
  ParamCacheState state(1000);
  const CompiledPlan plan = Plan("p", 400);
  ASSERT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kFill);
  state.Ran(plan, 3, ParamCacheMode::kFill, absl::OkStatus());
  // Other errors of a kUse run leave the state alone.
  EXPECT_FALSE(state.Ran(plan, 3, ParamCacheMode::kUse, absl::InvalidArgumentError("bad")));
  EXPECT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kUse);
  EXPECT_TRUE(state.Ran(plan, 3, ParamCacheMode::kUse,
                        absl::FailedPreconditionError("nothing kept")));
  EXPECT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kFill);
  // Another request's fill may succeed before the refused one runs again:
  // the refused one still fills (it is refused at most once).
  state.Ran(plan, 3, ParamCacheMode::kFill, absl::OkStatus());
  EXPECT_EQ(state.ModeFor(plan, 3), ParamCacheMode::kUse);
  EXPECT_EQ(state.ModeFor(plan, 3, /*refill=*/true), ParamCacheMode::kFill);
}

TEST(ParamCacheStateTest, TheBudgetBoundsAllPlansUntilTheirGenerationGoes) {
  ParamCacheState state(1000);
  EXPECT_EQ(state.ModeFor(Plan("a", 600), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.ModeFor(Plan("b", 300, "m", 2), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.ModeFor(Plan("c", 200), 1), ParamCacheMode::kOff);  // 1100 > 1000
  EXPECT_EQ(state.ModeFor(Plan("d", 100, "other"), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.counted_bytes(), 1000);
  state.EraseGeneration("m", 1);  // drops "a" only
  EXPECT_EQ(state.counted_bytes(), 400);
  EXPECT_EQ(state.ModeFor(Plan("c", 200), 1), ParamCacheMode::kFill);
  EXPECT_EQ(state.ModeFor(Plan("b", 300, "m", 2), 1), ParamCacheMode::kFill);  // still counted
  EXPECT_EQ(state.counted_bytes(), 600);
  // A run that ends after its generation went changes nothing.
  EXPECT_FALSE(state.Ran(Plan("a", 600), 1, ParamCacheMode::kFill, absl::OkStatus()));
  EXPECT_EQ(state.counted_bytes(), 600);
}

TEST(ParamCacheStateTest, OffWithoutKeptBytesOverTheBudgetOrWithoutAVersion) {
  ParamCacheState state(1000);
  EXPECT_EQ(state.ModeFor(Plan("none", 0), 1), ParamCacheMode::kOff);
  EXPECT_EQ(state.ModeFor(Plan("big", 1001), 1), ParamCacheMode::kOff);
  EXPECT_EQ(state.ModeFor(Plan("fits", 1000), 0), ParamCacheMode::kOff);
  EXPECT_EQ(state.ModeFor(Plan("fits", 1000), 1), ParamCacheMode::kFill);
  EXPECT_EQ(ParamCacheState(0).ModeFor(Plan("x", 1), 1), ParamCacheMode::kOff);
  EXPECT_FALSE(state.Ran(Plan("big", 1001), 1, ParamCacheMode::kOff,
                         absl::FailedPreconditionError("x")));
}

}  // namespace
}  // namespace meshserve
