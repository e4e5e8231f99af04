#include "common/sharding/testing/random_sharding.h"

#include <random>
#include <set>
#include <string>

#include "absl/random/distributions.h"
#include "common/sharding/testing/seed.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace testing {
namespace {

TEST(RandomShardingTest, GeneratorsKeepTheirGuarantees) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  int num_tuples = 0, num_unreduced = 0, num_short = 0;
  for (int i = 0; i < 2000; ++i) {
    Mesh mesh = RandomMesh(gen, 4, 64);
    ASSERT_LE(mesh.num_axes(), 4);
    ASSERT_LE(mesh.num_devices(), 64);
    ASSERT_THAT(Mesh::Create(mesh.axes()), IsOk());
    const int rank = absl::Uniform<int>(absl::IntervalClosed, gen, 0, 4);
    PartitionSpec spec = RandomPartitionSpec(gen, mesh, rank);
    ASSERT_LE(spec.size(), rank);
    std::set<std::string> used;
    for (const auto& e : spec.entries()) {
      num_tuples += e.size() > 1;
      for (const auto& a : e) ASSERT_TRUE(used.insert(a).second) << spec;
    }
    for (const auto& a : spec.unreduced()) ASSERT_TRUE(used.insert(a).second) << spec;
    num_unreduced += !spec.unreduced().empty();
    num_short += spec.size() < rank;
    auto sharding = NamedSharding::Create(mesh, spec, rank);
    ASSERT_THAT(sharding, IsOk()) << mesh << " " << spec;
    std::vector<int64_t> shape = RandomDivisibleShape(gen, *sharding, 16);
    ASSERT_EQ(static_cast<int>(shape.size()), rank);
    for (int d = 0; d < rank; ++d) {
      ASSERT_GT(shape[d], 0);
      ASSERT_EQ(shape[d] % sharding->NumShardsAlongDim(d), 0);
    }
    ASSERT_THAT(CheckDivisible(shape, *sharding), IsOk());
  }
  // The generators exercise the interesting cases.
  EXPECT_GT(num_tuples, 50);
  EXPECT_GT(num_unreduced, 50);
  EXPECT_GT(num_short, 50);
}

TEST(RandomShardingTest, SameSeedSameOutput) {
  std::mt19937_64 a(99), b(99);
  for (int i = 0; i < 100; ++i) {
    Mesh ma = RandomMesh(a, 4, 64), mb = RandomMesh(b, 4, 64);
    ASSERT_EQ(ma, mb);
    ASSERT_EQ(RandomPartitionSpec(a, ma, 3), RandomPartitionSpec(b, mb, 3));
  }
}

TEST(RandomShardingTest, MixedAxisTypes) {
  std::mt19937_64 gen(5);
  RandomMeshOptions options;
  options.auto_probability = 0.5;
  int num_auto = 0;
  for (int i = 0; i < 200; ++i) {
    // The mesh must outlive the loop (axes() of a temporary would dangle).
    const Mesh mesh = RandomMesh(gen, 4, 64, options);
    for (const MeshAxis& a : mesh.axes()) {
      num_auto += a.type == AxisType::kAuto;
    }
  }
  EXPECT_GT(num_auto, 50);
}

}  // namespace
}  // namespace testing
}  // namespace meshserve
