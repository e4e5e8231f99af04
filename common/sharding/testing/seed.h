// Reproducible seeds for property tests.
//
//   TEST(ShardLayoutPropertyTest, ...) {
//     const uint64_t seed = TestSeed();
//     ScopedSeedTrace trace(seed);      // failures print the seed
//     std::mt19937_64 gen(seed);
//     ... RandomMesh(gen, ...) ...
//   }
//
// TestSeed() reads MESHSERVE_TEST_SEED (decimal) when set, else draws a random
// seed. Every failure inside the trace's scope prints
// "seed=N (rerun with MESHSERVE_TEST_SEED=N)".
#ifndef MESHSERVE_COMMON_SHARDING_TESTING_SEED_H_
#define MESHSERVE_COMMON_SHARDING_TESTING_SEED_H_

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace meshserve {
namespace testing {

inline constexpr char kTestSeedEnv[] = "MESHSERVE_TEST_SEED";

// The seed from MESHSERVE_TEST_SEED, or a fresh random one when unset or not a
// number (a malformed value is reported on stderr, never a crash).
uint64_t TestSeed();

// "seed=N (rerun with MESHSERVE_TEST_SEED=N)".
std::string SeedMessage(uint64_t seed);

// Adds SeedMessage(seed) to every gtest failure in its scope.
class ScopedSeedTrace {
 public:
  explicit ScopedSeedTrace(uint64_t seed)
      : trace_(__FILE__, __LINE__, SeedMessage(seed)) {}

 private:
  ::testing::ScopedTrace trace_;
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_TESTING_SEED_H_
