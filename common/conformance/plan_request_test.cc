#include "common/conformance/plan_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

constexpr char kAllGather[] = R"({
  "shape": [8, 4], "dtype": "float32",
  "src": {"mesh": {"x": 2, "y": 2}, "spec": [["x", "y"], null]},
  "dst": {"mesh": {"x": 2, "y": 2}, "spec": ["x"], "devices": [0, 0, 1, 1]}
})";

constexpr char kAxisOrder[] = R"json({"shape": [4],
  "src": {"mesh": {"z": 2, "a": 2}, "spec": ["z"]},
  "dst": {"mesh": {"z": 2, "a": 2}, "spec": "P('a')"}})json";

constexpr char kReduceScatter[] = R"({"shape": [4],
  "src": {"mesh": {"x": 2}, "spec": [null], "unreduced": ["x"]},
  "dst": {"mesh": {"x": 2}, "spec": ["x"]}})";

TEST(PlanRequestTest, DecodesBothSides) {
  ASSERT_OK_AND_ASSIGN(PlanRequest r, ParsePlanRequest(kAllGather));
  EXPECT_EQ(r.shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(r.dtype, DType::kFloat32);
  EXPECT_EQ(r.src.sharding.mesh().ToString(), "mesh[x=2,y=2]");
  EXPECT_EQ(r.src.sharding.spec().ToString(), "P(('x', 'y'), None)");
  EXPECT_EQ(r.src.device_workers, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.dst.device_workers, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(r.SrcType().ToString(), "float32[8@(x,y),4]");
}

TEST(PlanRequestTest, MeshKeepsAxisOrder) {
  ASSERT_OK_AND_ASSIGN(PlanRequest r, ParsePlanRequest(kAxisOrder));
  EXPECT_EQ(r.src.sharding.mesh().axis(0).name, "z");
  EXPECT_EQ(r.dst.sharding.spec().ToString(), "P('a')");
}

TEST(PlanRequestTest, EncodesNetworkTransfersOnly) {
  ASSERT_OK_AND_ASSIGN(PlanRequest r, ParsePlanRequest(kAllGather));
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan, PlanForRequest(r));
  const nlohmann::ordered_json j = PlanToJson(plan, r.dtype);
  // Worker 0 (devices 0, 1) needs rows [0, 4) and holds them (source devices
  // 0 and 1 are workers 0 and 1): it lacks rows [2, 4), 8 elements.
  EXPECT_EQ(j["bytes_moved"], plan.lower_bound_bytes);
  EXPECT_EQ(j["local_transfers"].get<int64_t>() +
                static_cast<int64_t>(j["transfers"].size()),
            plan.NumTransfers());
  for (const auto& t : j["transfers"]) EXPECT_NE(t["src"], t["dst"]);
}

TEST(PlanRequestTest, EncodesReduceScatter) {
  ASSERT_OK_AND_ASSIGN(PlanRequest r, ParsePlanRequest(kReduceScatter));
  ASSERT_OK_AND_ASSIGN(ReshardPlan plan, PlanForRequest(r));
  const nlohmann::ordered_json j = PlanToJson(plan, r.dtype);
  EXPECT_EQ(j["pattern"], "reduce-scatter");
  EXPECT_EQ(j["bytes_moved"], 2 * 2 * 4);
  EXPECT_EQ(j["lower_bound_bytes"], 2 * 2 * 4);
  ASSERT_EQ(j["transfers"].size(), 2u);
  EXPECT_EQ(j["transfers"][0]["kind"], "reduce");
  EXPECT_EQ(j["transfers"][0]["box"].dump(), "[[0,2]]");
  EXPECT_EQ(j["transfers"][0]["src"], 1);
  EXPECT_EQ(j["transfers"][0]["dst"], 0);
}

void ExpectRejected(const char* text, const char* substr) {
  EXPECT_THAT(ParsePlanRequest(text),
              StatusIs(absl::StatusCode::kInvalidArgument, substr))
      << text;
}

TEST(PlanRequestTest, RejectsBrokenJson) {
  ExpectRejected(R"({"shape": [4], )", "broken JSON");
}

TEST(PlanRequestTest, RejectsMissingField) {
  ExpectRejected(R"({"shape": [4], "src": {"mesh": {"x": 2}, "spec": []}})",
                 "missing field 'dst'");
  ExpectRejected(R"({"shape": [4], "src": {"spec": []}, "dst": {}})",
                 "missing field 'mesh' in src");
}

TEST(PlanRequestTest, RejectsMalformedSpec) {
  ExpectRejected(R"({"shape": [4], "src": {"mesh": {"x": 2}, "spec": [3]},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "src.spec entry 3");
}

TEST(PlanRequestTest, RejectsUnknownAxis) {
  ExpectRejected(R"({"shape": [4], "src": {"mesh": {"x": 2}, "spec": []},
                     "dst": {"mesh": {"x": 2}, "spec": ["q"]}})",
                 "q");
}

TEST(PlanRequestTest, RejectsNonDivisibleDim) {
  ExpectRejected(R"({"shape": [5], "src": {"mesh": {"x": 2}, "spec": ["x"]},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "5");
}

TEST(PlanRequestTest, RejectsSpecLongerThanRank) {
  ExpectRejected(R"({"shape": [4], "src": {"mesh": {"x": 2}, "spec": ["x", null]},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "src");
}

TEST(PlanRequestTest, RejectsWrongDeviceCount) {
  ExpectRejected(R"({"shape": [4], "src": {"mesh": {"x": 2}, "spec": [], "devices": [0, 1, 2]},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "src.devices [0,1,2]");
}

TEST(PlanRequestTest, RejectsUnknownDType) {
  ExpectRejected(R"({"shape": [4], "dtype": "float7", "src": {"mesh": {"x": 2}, "spec": []},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "float7");
}

TEST(PlanRequestTest, RejectsNonIntegerShape) {
  ExpectRejected(R"({"shape": [4, "a"], "src": {"mesh": {"x": 2}, "spec": []},
                     "dst": {"mesh": {"x": 2}, "spec": []}})",
                 "\"a\"");
}

}  // namespace
}  // namespace meshserve
