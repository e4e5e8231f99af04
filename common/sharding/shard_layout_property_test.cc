// Property tests over thousands of random meshes, specs and shapes (seeded via
// MESHSERVE_TEST_SEED; a failure prints the seed).
#include "tests/testing/box_matcher_warning.h"  // first: see there

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/random/distributions.h"
#include "common/sharding/shard_layout.h"
#include "common/sharding/testing/random_sharding.h"
#include "common/sharding/testing/seed.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::RandomDivisibleShape;
using ::meshserve::testing::RandomMesh;
using ::meshserve::testing::RandomPartitionSpec;
using ::meshserve::testing::RandomShape;
using ::meshserve::testing::ScopedSeedTrace;
using ::meshserve::testing::TestSeed;

constexpr int kIterations = 4000;

struct Case {
  NamedSharding sharding;
  std::vector<int64_t> shape;
};

Case RandomCase(std::mt19937_64& gen, bool divisible) {
  const int rank = absl::Uniform<int>(absl::IntervalClosed, gen, 0, 4);
  Mesh mesh = RandomMesh(gen, /*max_axes=*/4, /*max_devices=*/64);
  PartitionSpec spec = RandomPartitionSpec(gen, mesh, rank);
  auto sharding = NamedSharding::Create(mesh, spec, rank);
  EXPECT_THAT(sharding, IsOk()) << mesh << " " << spec;
  Case c{*sharding, {}};
  c.shape = divisible ? RandomDivisibleShape(gen, c.sharding, 24)
                      : RandomShape(gen, rank, 13);
  return c;
}

// Coordinates of `device` along the unreduced axes.
std::vector<int64_t> UnreducedCoords(const NamedSharding& s, int64_t device) {
  std::vector<int64_t> coords = s.mesh().UncheckedCoordsOfDevice(device);
  std::vector<int64_t> out;
  for (const std::string& name : s.spec().unreduced()) {
    out.push_back(coords[*s.mesh().AxisIndex(name)]);
  }
  return out;
}

void CheckLayout(const Case& c) {
  SCOPED_TRACE(::testing::Message() << c.sharding << " shape=" << Box::FromShape(c.shape));
  const NamedSharding& s = c.sharding;
  const Box full = Box::FromShape(c.shape);
  const std::vector<Box> boxes = ShardBoxesByDevice(c.shape, s);
  ASSERT_EQ(static_cast<int64_t>(boxes.size()), s.mesh().num_devices());
  for (int64_t d = 0; d < s.mesh().num_devices(); ++d) {
    ASSERT_EQ(boxes[d], ShardBoxForDevice(c.shape, s, d)) << "device " << d;
    ASSERT_THAT(CheckedShardBoxForDevice(c.shape, s, d), IsOkAndHolds(boxes[d]));
    ASSERT_TRUE(full.Contains(boxes[d])) << boxes[d];
  }

  // Replica groups partition the devices, sorted, ordered by first device, and
  // members hold identical boxes.
  const std::vector<std::vector<int64_t>> groups = ReplicaGroups(s);
  std::vector<int> seen(s.mesh().num_devices(), 0);
  int64_t previous_first = -1;
  for (const std::vector<int64_t>& group : groups) {
    ASSERT_FALSE(group.empty());
    ASSERT_GT(group.front(), previous_first);
    previous_first = group.front();
    ASSERT_TRUE(std::is_sorted(group.begin(), group.end()));
    for (int64_t d : group) {
      ++seen[d];
      ASSERT_EQ(boxes[d], boxes[group.front()]) << "device " << d;
      ASSERT_EQ(UnreducedCoords(s, d), UnreducedCoords(s, group.front()));
    }
  }
  for (int64_t d = 0; d < s.mesh().num_devices(); ++d) ASSERT_EQ(seen[d], 1);

  // One representative per group (at unreduced coordinates 0) tiles the full
  // box: contained, pairwise disjoint, element counts add up; for small shapes
  // also count every element explicitly.
  std::vector<Box> reps;
  for (const std::vector<int64_t>& group : groups) {
    const std::vector<int64_t> u = UnreducedCoords(s, group.front());
    if (std::all_of(u.begin(), u.end(), [](int64_t x) { return x == 0; })) {
      reps.push_back(boxes[group.front()]);
    }
  }
  int64_t total = 0;
  for (size_t i = 0; i < reps.size(); ++i) {
    total += reps[i].NumElements();
    for (size_t j = i + 1; j < reps.size() && reps.size() <= 256; ++j) {
      ASSERT_TRUE(Intersect(reps[i], reps[j]).IsEmpty())
          << reps[i] << " overlaps " << reps[j];
    }
  }
  ASSERT_EQ(total, full.NumElements());
  if (full.NumElements() <= 4096) {
    std::vector<int> count(full.NumElements(), 0);
    for (const Box& b : reps) {
      if (b.IsEmpty()) continue;
      std::vector<int64_t> index(b.rank());
      for (int d = 0; d < b.rank(); ++d) index[d] = b[d].begin;
      for (;;) {
        int64_t flat = 0;
        for (int d = 0; d < b.rank(); ++d) flat = flat * c.shape[d] + index[d];
        ++count[flat];
        int d = b.rank() - 1;
        while (d >= 0 && ++index[d] == b[d].end) {
          index[d] = b[d].begin;
          --d;
        }
        if (d < 0) break;
      }
    }
    for (size_t e = 0; e < count.size(); ++e) ASSERT_EQ(count[e], 1) << "element " << e;
  }
}

TEST(ShardLayoutPropertyTest, ReplicaGroupRepresentativesTileDivisibleShapes) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < kIterations; ++i) {
    Case c = RandomCase(gen, /*divisible=*/true);
    ASSERT_THAT(CheckDivisible(c.shape, c.sharding), IsOk());
    ASSERT_NO_FATAL_FAILURE(CheckLayout(c)) << "iteration " << i;
    // Even sharding: every device's box has the same shape.
    const std::vector<Box> boxes = ShardBoxesByDevice(c.shape, c.sharding);
    for (const Box& b : boxes) ASSERT_EQ(b.shape(), boxes[0].shape());
  }
}

TEST(ShardLayoutPropertyTest, ReplicaGroupRepresentativesTileUnevenShapes) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < kIterations; ++i) {
    ASSERT_NO_FATAL_FAILURE(CheckLayout(RandomCase(gen, /*divisible=*/false)))
        << "iteration " << i;
  }
}

TEST(ShardLayoutPropertyTest, DevicesOverlappingBoxMatchesBruteForce) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < kIterations / 4; ++i) {
    Case c = RandomCase(gen, absl::Bernoulli(gen, 0.5));
    std::vector<Interval> dims;
    for (int64_t d : c.shape) {
      int64_t a = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, d);
      int64_t b = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, d);
      dims.push_back(Interval{std::min(a, b), std::max(a, b)});
    }
    const Box query(dims);
    std::vector<int64_t> want;
    const std::vector<Box> boxes = ShardBoxesByDevice(c.shape, c.sharding);
    for (int64_t d = 0; d < static_cast<int64_t>(boxes.size()); ++d) {
      if (!Intersect(boxes[d], query).IsEmpty()) want.push_back(d);
    }
    ASSERT_EQ(DevicesOverlappingBox(c.shape, c.sharding, query), want)
        << c.sharding << " query=" << query;
  }
}

TEST(ShardLayoutPropertyTest, TextFormsRoundTrip) {
  const uint64_t seed = TestSeed();
  ScopedSeedTrace trace(seed);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < kIterations; ++i) {
    ::meshserve::testing::RandomMeshOptions options;
    options.auto_probability = 0.2;
    options.manual_probability = 0.1;
    Mesh mesh = RandomMesh(gen, 5, 256, options);
    ASSERT_THAT(ParseMesh(mesh.ToString()), IsOkAndHolds(mesh));
    PartitionSpec spec = RandomPartitionSpec(gen, mesh, absl::Uniform(gen, 0, 5));
    ASSERT_THAT(ParsePartitionSpec(spec.ToString()), IsOkAndHolds(spec)) << spec;
    Box box = Box::FromShape(RandomShape(gen, absl::Uniform(gen, 0, 4), 100));
    ASSERT_THAT(ParseBox(box.ToString()), IsOkAndHolds(box));
  }
}

}  // namespace
}  // namespace meshserve
