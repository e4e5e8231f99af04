#include "common/sharding/box.h"

#include <limits>
#include <random>
#include <vector>

#include "absl/hash/hash_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

TEST(IntervalTest, IntersectOverlapping) {
  EXPECT_EQ(Intersect(Interval{0, 4}, Interval{2, 6}), (Interval{2, 4}));
}

TEST(IntervalTest, IntersectDisjointIsEmpty) {
  Interval i = Intersect(Interval{0, 2}, Interval{5, 6});
  EXPECT_TRUE(i.empty());
  EXPECT_EQ(i.size(), 0);
}

TEST(IntervalTest, ContainsIsHalfOpen) {
  Interval i{2, 5};
  EXPECT_FALSE(i.Contains(1));
  EXPECT_TRUE(i.Contains(2));
  EXPECT_TRUE(i.Contains(4));
  EXPECT_FALSE(i.Contains(5));
}

TEST(BoxTest, FromShapeAndNumElements) {
  Box b = Box::FromShape({4, 8});
  EXPECT_EQ(b.rank(), 2);
  EXPECT_EQ(b[0], (Interval{0, 4}));
  EXPECT_EQ(b[1], (Interval{0, 8}));
  EXPECT_EQ(b.NumElements(), 32);
  EXPECT_EQ(b.shape(), (std::vector<int64_t>{4, 8}));
}

TEST(BoxTest, RankZeroHasOneElementAndIsNotEmpty) {
  Box b;
  EXPECT_EQ(b.NumElements(), 1);
  EXPECT_FALSE(b.IsEmpty());
  EXPECT_EQ(b.ToString(), "[]");
}

TEST(BoxTest, IntersectMatchesHeaderExample) {
  Box a({{0, 4}, {0, 8}});
  Box b({{2, 6}, {4, 12}});
  EXPECT_EQ(Intersect(a, b), Box({{2, 4}, {4, 8}}));
}

TEST(BoxTest, IsEmptyWhenAnyDimEmpty) {
  EXPECT_TRUE(Box({{0, 4}, {3, 3}}).IsEmpty());
  EXPECT_EQ(Box({{0, 4}, {3, 3}}).NumElements(), 0);
}

TEST(BoxTest, Contains) {
  Box outer({{0, 4}, {0, 8}});
  EXPECT_TRUE(outer.Contains(Box({{1, 3}, {0, 8}})));
  EXPECT_FALSE(outer.Contains(Box({{1, 5}, {0, 8}})));
  EXPECT_TRUE(outer.Contains(Box({{10, 10}, {0, 8}})));  // empty inner
  EXPECT_FALSE(outer.Contains(Box({{0, 1}})));            // rank mismatch
}

TEST(BoxTest, ToStringAndParseRoundTrip) {
  Box b({{0, 4}, {2, 8}});
  EXPECT_EQ(b.ToString(), "[0:4, 2:8]");
  EXPECT_THAT(ParseBox(b.ToString()), IsOkAndHolds(b));
  EXPECT_THAT(ParseBox("[]"), IsOkAndHolds(Box()));
  EXPECT_THAT(ParseBox("  [ 1 : 2 ,3:3 ] "), IsOkAndHolds(Box({{1, 2}, {3, 3}})));
}

TEST(BoxTest, ParseRejectsMalformedText) {
  EXPECT_THAT(ParseBox("0:4"), StatusIs(absl::StatusCode::kInvalidArgument, "0:4"));
  EXPECT_THAT(ParseBox("[0:4, x:2]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "x:2"));
  EXPECT_THAT(ParseBox("[0:4:5]"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBox("[5:4]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "begin > end"));
  EXPECT_THAT(ParseBox("[0:4,]"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BoxTest, ParseRejectsNegativeBegin) {
  EXPECT_THAT(ParseBox("[-1:4]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "negative begin"));
}

TEST(BoxTest, NumElementsSaturatesInsteadOfOverflowing) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(Box({{0, big}, {0, big}}).NumElements(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Box({{0, big}, {0, big}, {0, 0}}).NumElements(), 0);
}

TEST(BoxTest, LessIsLexicographic) {
  EXPECT_LT(Box({{0, 2}, {4, 8}}), Box({{0, 2}, {5, 8}}));
  EXPECT_LT(Box({{0, 2}}), Box({{0, 3}}));
  EXPECT_FALSE(Box({{1, 2}}) < Box({{0, 3}}));
}

TEST(BoxTest, HashIsCorrect) {
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly({
      Box(), Box({{0, 4}}), Box({{0, 4}, {2, 8}}), Box({{0, 0}, {0, 0}}),
      Box({{1, 4}, {2, 8}})}));
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly(
      {Interval{0, 1}, Interval{0, 2}, Interval{3, 3}}));
}

TEST(BoxTest, SubtractAndUncoveredMatchHeaderExamples) {
  const Box from({{0, 4}, {0, 6}});
  EXPECT_EQ(SubtractBox(from, Box({{1, 3}, {2, 4}})),
            (std::vector<Box>{Box({{0, 1}, {0, 6}}), Box({{3, 4}, {0, 6}}),
                              Box({{1, 3}, {0, 2}}), Box({{1, 3}, {4, 6}})}));
  const std::vector<Box> minus = {Box({{0, 2}, {0, 6}}), Box({{1, 3}, {2, 4}})};
  EXPECT_EQ(Uncovered(from, minus),
            (std::vector<Box>{Box({{3, 4}, {0, 6}}), Box({{2, 3}, {0, 2}}),
                              Box({{2, 3}, {4, 6}})}));
  EXPECT_EQ(UncoveredElements(from, minus), 10);
}

TEST(BoxTest, SubtractEdgeCases) {
  const Box a({{0, 4}, {0, 2}});
  EXPECT_TRUE(SubtractBox(a, a).empty());
  EXPECT_EQ(SubtractBox(a, Box({{5, 6}, {0, 1}})), std::vector<Box>{a});
  EXPECT_TRUE(Uncovered(Box({{0, 0}, {0, 2}}), {}).empty());
  EXPECT_EQ(Uncovered(a, {}), std::vector<Box>{a});
  EXPECT_TRUE(Uncovered(Box(), {Box()}).empty());  // rank 0: one element, covered
  EXPECT_EQ(UncoveredElements(Box(), {}), 1);
}

// Uncovered against a brute-force walk over every element: the pieces are
// disjoint, lie in `from`, and hold exactly the elements no box of `minus`
// contains.
TEST(BoxTest, UncoveredMatchesBruteForceElementCount) {
  std::mt19937 rng(7);
  auto interval = [&](int64_t n) {
    int64_t a = std::uniform_int_distribution<int64_t>(0, n)(rng);
    int64_t b = std::uniform_int_distribution<int64_t>(0, n)(rng);
    return a <= b ? Interval{a, b} : Interval{b, a};
  };
  auto contains = [](const Box& box, const std::vector<int64_t>& index) {
    for (int d = 0; d < box.rank(); ++d) {
      if (!box[d].Contains(index[d])) return false;
    }
    return true;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + trial % 3;
    const int64_t n = 5;
    Box from;
    for (int d = 0; d < rank; ++d) from.mutable_dims().push_back(interval(n));
    std::vector<Box> minus(trial % 4);
    for (Box& m : minus) {
      for (int d = 0; d < rank; ++d) m.mutable_dims().push_back(interval(n));
    }
    const std::vector<Box> pieces = Uncovered(from, minus);
    int64_t expected = 0;
    std::vector<int64_t> index(rank, 0);
    for (int64_t flat = 0; flat < n * n * n; ++flat) {
      int64_t rest = flat;
      for (int d = 0; d < rank; ++d, rest /= n) index[d] = rest % n;
      if (rest != 0) break;  // past the n^rank grid
      bool want = contains(from, index);
      for (const Box& m : minus) want = want && !contains(m, index);
      int holders = 0;
      for (const Box& p : pieces) holders += contains(p, index) ? 1 : 0;
      ASSERT_EQ(holders, want ? 1 : 0)
          << "trial " << trial << " from " << from << " element " << flat;
      expected += want ? 1 : 0;
    }
    EXPECT_EQ(UncoveredElements(from, minus), expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace meshserve
