#include "common/sharding/testing/seed.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace testing {
namespace {

TEST(SeedTest, ReadsSeedFromEnvironment) {
  ASSERT_EQ(setenv(kTestSeedEnv, "12345", 1), 0);
  EXPECT_EQ(TestSeed(), 12345u);
  unsetenv(kTestSeedEnv);
}

TEST(SeedTest, MalformedSeedFallsBackToRandom) {
  ASSERT_EQ(setenv(kTestSeedEnv, "not-a-number", 1), 0);
  // Two random 64-bit draws colliding is practically impossible.
  EXPECT_NE(TestSeed(), TestSeed());
  unsetenv(kTestSeedEnv);
}

TEST(SeedTest, MessageNamesTheRerunVariable) {
  EXPECT_EQ(SeedMessage(42), "seed=42 (rerun with MESHSERVE_TEST_SEED=42)");
}

TEST(SeedTest, TracePrintsSeedOnFailure) {
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD,
        &failures);
    ScopedSeedTrace trace(7);
    ADD_FAILURE() << "boom";
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_THAT(failures.GetTestPartResult(0).message(),
              ::testing::HasSubstr("seed=7 (rerun with MESHSERVE_TEST_SEED=7)"));
}

}  // namespace
}  // namespace testing
}  // namespace meshserve
