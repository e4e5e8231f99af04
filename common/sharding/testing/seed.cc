#include "common/sharding/testing/seed.h"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshserve {
namespace testing {

uint64_t TestSeed() {
  const char* env = std::getenv(kTestSeedEnv);
  if (env != nullptr && *env != '\0') {
    uint64_t seed = 0;
    if (absl::SimpleAtoi(env, &seed)) return seed;
    std::cerr << kTestSeedEnv << "=\"" << env
              << "\" is not a number; using a random seed\n";
  }
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string SeedMessage(uint64_t seed) {
  return absl::StrCat("seed=", seed, " (rerun with ", kTestSeedEnv, "=", seed,
                      ")");
}

}  // namespace testing
}  // namespace meshserve
