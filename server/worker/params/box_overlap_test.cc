// FirstDifference and CopyRegion against a
// brute-force walk over every element (an independent reference: a set of
// covered indices, element-by-element loops over explicit strides), on
// random boxes of rank 0-3 (seed: MESHSERVE_TEST_SEED, printed on failure).
#include "server/worker/params/box_overlap.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/sharding/testing/seed.h"

namespace meshserve {
namespace {

using Index = std::vector<int64_t>;

// Every index of `box`, row-major: the indices of dims [d, rank) after
// `prefix`, appended to *out.
void AppendElements(const Box& box, Index prefix, std::vector<Index>* out) {
  const int d = static_cast<int>(prefix.size());
  if (d == box.rank()) {
    out->push_back(std::move(prefix));
    return;
  }
  for (int64_t i = box[d].begin; i < box[d].end; ++i) {
    Index next = prefix;
    next.push_back(i);
    AppendElements(box, std::move(next), out);
  }
}

std::vector<Index> Elements(const Box& box) {
  std::vector<Index> out;
  AppendElements(box, {}, &out);
  return out;
}

bool Inside(const Box& box, const Index& index) {
  for (int d = 0; d < box.rank(); ++d) {
    if (!box[d].Contains(index[d])) return false;
  }
  return true;
}

// Byte offset of `index` in a row-major buffer of `box`.
int64_t Offset(const Box& box, const Index& index, int64_t elem) {
  int64_t offset = 0;
  for (int d = 0; d < box.rank(); ++d) offset = offset * box[d].size() + index[d] - box[d].begin;
  return offset * elem;
}

Box RandomBox(std::mt19937* rng, const Box& within) {
  Box box = within;
  for (int d = 0; d < box.rank(); ++d) {
    std::uniform_int_distribution<int64_t> pick(within[d].begin, within[d].end);
    int64_t a = pick(*rng), b = pick(*rng);
    if (a > b) std::swap(a, b);
    box[d] = Interval{a, b};
  }
  return box;
}

TEST(BoxOverlapTest, ElementsWalksRowMajor) {
  const std::vector<Index> got = Elements(Box({Interval{1, 3}, Interval{4, 6}}));
  EXPECT_EQ(got, (std::vector<Index>{{1, 4}, {1, 5}, {2, 4}, {2, 5}}));
}

TEST(BoxOverlapTest, FirstDifferenceAndCopyRegionTouchOnlyTheRegion) {
  const uint64_t seed = testing::TestSeed();
  testing::ScopedSeedTrace trace(seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const Box array({Interval{0, 6}, Interval{0, 5}, Interval{0, 4}});
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t elem = trial % 2 == 0 ? 4 : 2;
    const Box a_box = RandomBox(&rng, array), b_box = RandomBox(&rng, array);
    const Box region = RandomBox(&rng, Intersect(a_box, b_box));
    // Both buffers hold f(global index) so they agree on the overlap.
    std::string a(a_box.NumElements() * elem, '\0'), b(b_box.NumElements() * elem, '\0');
    auto value = [&](const Index& i, int64_t byte) {
      return static_cast<char>(i[0] * 31 + i[1] * 7 + i[2] * 3 + byte);
    };
    for (const Index& i : Elements(a_box)) {
      for (int64_t k = 0; k < elem; ++k) a[Offset(a_box, i, elem) + k] = value(i, k);
    }
    for (const Index& i : Elements(b_box)) {
      for (int64_t k = 0; k < elem; ++k) b[Offset(b_box, i, elem) + k] = value(i, k);
    }
    EXPECT_FALSE(FirstDifference(a.data(), a_box, b.data(), b_box, region, elem).has_value());
    // Flip one byte of a random element outside the region and one or two
    // inside: the first in row-major order is named.
    std::vector<Index> in_region = Elements(region);
    for (const Index& i : Elements(a_box)) {
      if (!Inside(region, i)) {
        a[Offset(a_box, i, elem)] ^= 1;
        break;
      }
    }
    EXPECT_FALSE(FirstDifference(a.data(), a_box, b.data(), b_box, region, elem).has_value());
    if (in_region.empty()) continue;
    const size_t first = rng() % in_region.size(), second = rng() % in_region.size();
    a[Offset(a_box, in_region[first], elem) + elem - 1] ^= 0x40;
    b[Offset(b_box, in_region[second], elem)] ^= 0x10;
    std::optional<Index> at = FirstDifference(a.data(), a_box, b.data(), b_box, region, elem);
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(*at, in_region[std::min(first, second)]) << a_box << " " << b_box << " " << region;
    // CopyRegion: dst[region] = src[region], everything else untouched.
    std::string dst(b.size(), '\x7f');
    CopyRegion(a.data(), a_box, dst.data(), b_box, region, elem);
    for (const Index& i : Elements(b_box)) {
      const std::string got = dst.substr(Offset(b_box, i, elem), elem);
      const std::string want = Inside(region, i) ? a.substr(Offset(a_box, i, elem), elem)
                                                 : std::string(elem, '\x7f');
      EXPECT_EQ(got, want);
    }
  }
}

TEST(BoxOverlapTest, FirstDifferenceInRangeNamesTheElementOfTheFirstDifferingByte) {
  const uint64_t seed = testing::TestSeed();
  testing::ScopedSeedTrace trace(seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const Box array({Interval{0, 5}, Interval{0, 4}, Interval{0, 6}});
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t elem = trial % 2 == 0 ? 4 : 2;
    const Box buffer_box = RandomBox(&rng, array);
    const Box box = RandomBox(&rng, buffer_box);
    auto value = [](const Index& i, int64_t byte) {
      return static_cast<char>(i[0] * 29 + i[1] * 5 + i[2] * 11 + byte * 3);
    };
    std::string buffer(buffer_box.NumElements() * elem, '\0');
    for (const Index& i : Elements(buffer_box)) {
      for (int64_t k = 0; k < elem; ++k) buffer[Offset(buffer_box, i, elem) + k] = value(i, k);
    }
    const std::vector<Index> elements = Elements(box);  // the put's bytes, row-major
    std::string put;
    for (const Index& i : elements) {
      for (int64_t k = 0; k < elem; ++k) put.push_back(value(i, k));
    }
    if (put.empty()) continue;
    const int64_t begin = rng() % put.size();
    const int64_t end = begin + 1 + rng() % (put.size() - begin);  // a range splitting elements
    std::string range = put.substr(begin, end - begin);
    EXPECT_FALSE(FirstDifferenceInRange(range, begin, box, buffer.data(), buffer_box, elem)
                     .has_value());
    const int64_t flipped = rng() % range.size();
    range[flipped] ^= 0x20;
    std::optional<Index> at =
        FirstDifferenceInRange(range, begin, box, buffer.data(), buffer_box, elem);
    ASSERT_TRUE(at.has_value()) << box << " in " << buffer_box;
    EXPECT_EQ(*at, elements[(begin + flipped) / elem]) << box << " in " << buffer_box;
  }
}

TEST(BoxOverlapTest, RankZeroIsOneElement) {
  const char a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_EQ(FirstDifference(a, Box(), b, Box(), Box(), 4), std::optional<Index>(Index{}));
  EXPECT_TRUE(Uncovered(Box(), {Box()}).empty());
  EXPECT_EQ(Uncovered(Box(), {}).size(), 1u);
  EXPECT_EQ(FirstDifferenceInRange(absl::string_view(b + 3, 1), 3, Box(), a, Box(), 4),
            std::optional<Index>(Index{}));
  EXPECT_FALSE(FirstDifferenceInRange(absl::string_view(b, 3), 0, Box(), a, Box(), 4));
}

}  // namespace
}  // namespace meshserve
