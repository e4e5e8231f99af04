// Randomised robustness tests for the text parsers: random and mutated inputs
// never crash, and whatever parses round-trips through ToString().
#include "tests/testing/box_matcher_warning.h"  // first: see there

#include <random>
#include <string>

#include "absl/random/distributions.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/testing/random_sharding.h"
#include "common/sharding/testing/seed.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::ScopedSeedTrace;
using ::meshserve::testing::TestSeed;

constexpr char kAlphabet[] = "P()[]{},='\" xyNoneul=_Partiocdn1\\\t\n";

std::string RandomText(std::mt19937_64& gen, int max_len) {
  std::string out(absl::Uniform(gen, 0, max_len + 1), ' ');
  for (char& c : out) {
    c = absl::Bernoulli(gen, 0.05)
            ? static_cast<char>(absl::Uniform<int>(gen, 0, 256))
            : kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)];
  }
  return out;
}

std::string Mutate(std::mt19937_64& gen, std::string text) {
  const int num_edits = absl::Uniform(gen, 1, 4);
  for (int i = 0; i < num_edits; ++i) {
    const size_t pos = absl::Uniform<size_t>(gen, 0, text.size() + 1);
    const char c = kAlphabet[absl::Uniform<size_t>(gen, 0, sizeof(kAlphabet) - 1)];
    switch (absl::Uniform(gen, 0, 3)) {
      case 0:
        text.insert(pos, 1, c);
        break;
      case 1:
        if (pos < text.size()) text.erase(pos, 1);
        break;
      default:
        if (pos < text.size()) text[pos] = c;
    }
  }
  return text;
}

void CheckParsers(const std::string& text) {
  auto spec = ParsePartitionSpec(text);
  if (spec.ok()) {
    EXPECT_THAT(ParsePartitionSpec(spec->ToString()), IsOkAndHolds(*spec)) << text;
  } else {
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()),
                ::testing::HasSubstr("position"));
  }
  auto mesh = ParseMesh(text);
  if (mesh.ok()) {
    EXPECT_THAT(ParseMesh(mesh->ToString()), IsOkAndHolds(*mesh)) << text;
  } else {
    EXPECT_EQ(mesh.status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto box = ParseBox(text);
  if (box.ok()) {
    EXPECT_THAT(ParseBox(box->ToString()), IsOkAndHolds(*box)) << text;
  }
}

TEST(ParserRobustnessTest, RandomTextNeverCrashesAndRoundTrips) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < 20000; ++i) CheckParsers(RandomText(gen, 40));
}

TEST(ParserRobustnessTest, MutatedValidTextNeverCrashesAndRoundTrips) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  int num_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    Mesh mesh = ::meshserve::testing::RandomMesh(gen, 4, 64);
    PartitionSpec spec = ::meshserve::testing::RandomPartitionSpec(gen, mesh, 4);
    const std::string text =
        Mutate(gen, absl::Bernoulli(gen, 0.5) ? spec.ToString() : mesh.ToString());
    num_ok += ParsePartitionSpec(text).ok();
    CheckParsers(text);
  }
  EXPECT_GT(num_ok, 100);  // the mutations also produce valid specs
}

}  // namespace
}  // namespace meshserve
