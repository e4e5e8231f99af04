#include "common/json/json_util.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsNull;

const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

TEST(JsonUtilTest, ShowJsonIsCompactAndCut) {
  EXPECT_EQ(ShowJson(Json::parse(R"({"a": [1, 2]})")), R"({"a":[1,2]})");
  const std::string shown = ShowJson(Json(std::string(200, 'x')));
  EXPECT_EQ(shown.size(), 80u);
  EXPECT_EQ(shown.substr(77), "...");
}

TEST(JsonUtilTest, ParseJsonTextReportsThePosition) {
  EXPECT_THAT(ParseJsonText("[1, 2]"), IsOkAndHolds(Json::parse("[1,2]")));
  EXPECT_THAT(ParseJsonText("[1, "), StatusIs(kInvalid, "parse error"));
}

TEST(JsonUtilTest, FindJsonFieldTreatsNullAsMissing) {
  const Json obj = Json::parse(R"({"a": 1, "b": null})");
  ASSERT_NE(FindJsonField(obj, "a"), nullptr);
  EXPECT_EQ(*FindJsonField(obj, "a"), 1);
  EXPECT_THAT(FindJsonField(obj, "b"), IsNull());
  EXPECT_THAT(FindJsonField(obj, "c"), IsNull());
  EXPECT_THAT(FindJsonField(Json(3), "a"), IsNull());
}

TEST(JsonUtilTest, RequiredJsonFieldNamesThePath) {
  const Json obj = Json::parse(R"({"a": 1})");
  EXPECT_THAT(RequiredJsonField(obj, "b", "src"), StatusIs(kInvalid, "missing field 'b' in src"));
  EXPECT_THAT(RequiredJsonField(Json(3), "b", "src"),
              StatusIs(kInvalid, "src must be an object, got 3"));
}

TEST(JsonUtilTest, ScalarsNameThePathAndTheValue) {
  EXPECT_THAT(JsonInt(Json(7), "seed"), IsOkAndHolds(7));
  EXPECT_THAT(JsonInt(Json("zero"), "seed"),
              StatusIs(kInvalid, "seed must be an integer, got \"zero\""));
  EXPECT_THAT(JsonInt(Json(1.5), "seed"), StatusIs(kInvalid, "must be an integer"));
  EXPECT_THAT(JsonInt(Json(uint64_t{1} << 63), "seed"), StatusIs(kInvalid, "integer"));
  EXPECT_THAT(JsonNumber(Json(0.5), "stddev"), IsOkAndHolds(0.5));
  EXPECT_THAT(JsonNumber(Json("x"), "stddev"), StatusIs(kInvalid, "stddev must be a number"));
  EXPECT_THAT(JsonString(Json("a"), "op"), IsOkAndHolds("a"));
  EXPECT_THAT(JsonString(Json(1), "op"), StatusIs(kInvalid, "op must be a string, got 1"));
  EXPECT_THAT(JsonBool(Json(true), "auto_axes"), IsOkAndHolds(true));
  EXPECT_THAT(JsonBool(Json(1), "auto_axes"), StatusIs(kInvalid, "auto_axes must be true or false"));
}

TEST(JsonUtilTest, ListsShowTheBadElementAndTheList) {
  EXPECT_THAT(JsonIntList(Json::parse("[4, 2]"), "shape"), IsOkAndHolds(ElementsAre(4, 2)));
  EXPECT_THAT(JsonIntList(Json::parse(R"([4, "a"])"), "shape"),
              StatusIs(kInvalid, "shape must be a list of integers, got \"a\" in [4,\"a\"]"));
  EXPECT_THAT(JsonIntList(Json(4), "shape"), StatusIs(kInvalid, "list of integers, got 4"));
  EXPECT_THAT(JsonStringList(Json::parse(R"(["x"])"), "u"), IsOkAndHolds(ElementsAre("x")));
  EXPECT_THAT(JsonStringList(Json::parse("[3]"), "u"),
              StatusIs(kInvalid, "u must be a list of strings, got 3 in [3]"));
}

TEST(JsonUtilTest, CheckJsonKeysNamesTheUnknownField) {
  const Json obj = Json::parse(R"({"seed": 0, "sede": 0})");
  EXPECT_THAT(CheckJsonKeys(obj, {"seed", "sede"}, "top level"), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(CheckJsonKeys(obj, {"seed"}, "top level"),
              StatusIs(kInvalid, "top level: unknown field 'sede'"));
}

}  // namespace
}  // namespace meshserve
