#include "common/sharding/box.h"

#include <limits>
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

}  // namespace
}  // namespace meshserve
