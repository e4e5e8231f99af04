#include "common/conformance/rules_cases.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

#ifndef MESHSERVE_SOURCE_DIR
#define MESHSERVE_SOURCE_DIR "/work/main"
#endif

// The public case file lives outside the repo; tests that need it skip when
// it is missing.
std::string PublicCasesPath() {
  return std::string(MESHSERVE_SOURCE_DIR) +
         "/../shared/conformance/sharding-rules/public-cases.json";
}

// check.py's canonical spec: 1-tuples are names, [] is null, trailing nulls
// dropped.
Json CanonSpec(const Json& spec) {
  Json out = Json::array();
  if (spec.is_null()) return out;
  for (const Json& e : spec) {
    if (e.is_array() && e.empty()) {
      out.push_back(nullptr);
    } else if (e.is_array() && e.size() == 1) {
      out.push_back(e[0]);
    } else {
      out.push_back(e);
    }
  }
  while (!out.empty() && out.back().is_null()) out.erase(out.size() - 1);
  return out;
}

TEST(RulesCasesTest, PublicCasesMatchExpectations) {
  std::ifstream in(PublicCasesPath());
  if (!in) GTEST_SKIP() << "no public case file at " << PublicCasesPath();
  std::stringstream text;
  text << in.rdbuf();
  Json cases = Json::parse(text.str());
  ASSERT_OK_AND_ASSIGN(std::vector<RulesCaseOutcome> outcomes, RunRulesCaseFile(text.str()));
  ASSERT_EQ(outcomes.size(), cases.size());
  int passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& expect = cases[i]["expect"];
    Json got = RulesOutcomeToJson(outcomes[i]);
    SCOPED_TRACE(got.dump());
    EXPECT_EQ(got["id"], cases[i]["id"]);
    if (expect.contains("error")) {
      ASSERT_TRUE(got.contains("error")) << cases[i]["id"];
      EXPECT_THAT(got["error"].get<std::string>(),
                  HasSubstr(expect["error"].get<std::string>()));
    } else {
      ASSERT_FALSE(got.contains("error")) << cases[i]["id"];
      EXPECT_EQ(CanonSpec(got["spec"]), CanonSpec(expect["spec"])) << cases[i]["id"];
      if (expect.contains("type_str")) {
        EXPECT_EQ(got["type_str"], expect["type_str"]);
      }
      if (expect.contains("unreduced")) {
        EXPECT_EQ(got["unreduced"], expect["unreduced"]);
      }
      // The printed type string is the sharding core's ArrayType::ToString.
      EXPECT_EQ(got["type_str"].get<std::string>(), outcomes[i].result->ToString());
    }
    passed += !::testing::Test::HasFailure();
  }
}

TEST(RulesCasesTest, BrokenFileIsAnErrorNamingTheProblem) {
  EXPECT_THAT(RunRulesCaseFile("[{\"id\": "), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       "not valid JSON"));
  EXPECT_THAT(RunRulesCaseFile("42"), StatusIs(absl::StatusCode::kInvalidArgument, "42"));
}

// Each malformed case becomes an error line for that case, never a crash.
TEST(RulesCasesTest, MalformedCasesBecomeErrorLines) {
  const char* kCases = R"([
    {"id": "no_op", "mesh": {"x": 2}, "inputs": []},
    {"id": "unknown_op", "op": "frobnicate", "mesh": {"x": 2}, "inputs": []},
    {"id": "bad_shape", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": "eight", "spec": ["x"]}]},
    {"id": "bad_spec", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": [8], "spec": [[["x"]]]}]},
    {"id": "unknown_axis", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": [8], "spec": ["z"]}]},
    {"id": "bad_mesh", "op": "make_type", "mesh": {"x": 0},
     "inputs": [{"shape": [8], "spec": ["x"]}]},
    {"id": "bad_type", "op": "make_type", "mesh": {"x": 2}, "mesh_axis_types": {"x": "Sideways"},
     "inputs": [{"shape": [8], "spec": ["x"]}]},
    {"id": "missing_param", "op": "transpose", "mesh": {"x": 2},
     "inputs": [{"shape": [8, 2], "spec": ["x"]}], "params": {"perm": [0, 0]}},
    {"id": "wrong_arity", "op": "dot_general", "mesh": {"x": 2},
     "params": {"lhs_contracting": [1], "rhs_contracting": [0]},
     "inputs": [{"shape": [8, 2], "spec": ["x"]}]},
    "not an object",
    {"id": "huge", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": [1099511627776, 1099511627776], "spec": ["x"]}]}
  ])";
  ASSERT_OK_AND_ASSIGN(std::vector<RulesCaseOutcome> outcomes, RunRulesCaseFile(kCases));
  ASSERT_EQ(outcomes.size(), 11u);
  for (const RulesCaseOutcome& o : outcomes) {
    EXPECT_FALSE(o.result.ok()) << o.id;
    Json line = RulesOutcomeToJson(o);
    EXPECT_TRUE(line.contains("error")) << line.dump();
  }
  EXPECT_THAT(outcomes[0].result, StatusIs(absl::StatusCode::kInvalidArgument, "case.op"));
  EXPECT_THAT(outcomes[1].result, StatusIs(absl::StatusCode::kUnimplemented, "frobnicate"));
  EXPECT_THAT(outcomes[2].result, StatusIs(absl::StatusCode::kInvalidArgument, "\"eight\""));
  EXPECT_THAT(outcomes[3].result, StatusIs(absl::StatusCode::kInvalidArgument, "nest"));
  EXPECT_THAT(outcomes[4].result, StatusIs(absl::StatusCode::kInvalidArgument, "z"));
  EXPECT_THAT(outcomes[6].result, StatusIs(absl::StatusCode::kInvalidArgument, "Sideways"));
  EXPECT_THAT(outcomes[7].result, StatusIs(absl::StatusCode::kInvalidArgument, "permutation"));
  EXPECT_THAT(outcomes[8].result, StatusIs(absl::StatusCode::kInvalidArgument, "expects 2 inputs"));
  EXPECT_EQ(outcomes[9].id, "case#9");
}

TEST(RulesCasesTest, DTypeConvention) {
  const char* kCases = R"([
    {"id": "default", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": [8], "spec": ["x"]}]},
    {"id": "seed", "source": "seed discussion", "op": "make_type", "mesh": {"x": 2},
     "inputs": [{"shape": [8], "spec": ["x"]}]},
    {"id": "params", "source": "seed discussion", "op": "make_type", "params": {"dtype": "int32"},
     "mesh": {"x": 2}, "inputs": [{"shape": [8], "spec": ["x"]}]},
    {"id": "input", "op": "make_type", "params": {"dtype": "int32"}, "mesh": {"x": 2},
     "inputs": [{"shape": [8], "spec": ["x"], "dtype": "float16"}]}
  ])";
  ASSERT_OK_AND_ASSIGN(std::vector<RulesCaseOutcome> o, RunRulesCaseFile(kCases));
  EXPECT_EQ(RulesOutcomeToJson(o[0])["type_str"], "float32[8@x]");
  EXPECT_EQ(RulesOutcomeToJson(o[1])["type_str"], "bfloat16[8@x]");
  EXPECT_EQ(RulesOutcomeToJson(o[2])["type_str"], "int32[8@x]");
  EXPECT_EQ(RulesOutcomeToJson(o[3])["type_str"], "float16[8@x]");
}

TEST(RulesCasesTest, MeshAxisOrderIsKeptAndAutoAxesLeaveTheType) {
  const char* kCases = R"([
    {"id": "order", "op": "make_type", "mesh": {"z": 2, "a": 2},
     "inputs": [{"shape": [8, 4], "spec": [["z", "a"], null]}]},
    {"id": "mixed", "op": "make_type", "mesh": {"x": 2, "y": 2},
     "mesh_axis_types": {"y": "Auto"},
     "inputs": [{"shape": [8, 4], "spec": [["x", "y"], null]}]},
    {"id": "all_auto", "op": "dot_general", "mesh": {"x": 2, "y": 2},
     "mesh_axis_types": {"x": "Auto", "y": "Auto"},
     "params": {"lhs_contracting": [1], "rhs_contracting": [0]},
     "inputs": [{"shape": [8, 2], "spec": ["x", "y"]}, {"shape": [2, 8], "spec": ["y", "x"]}]}
  ])";
  ASSERT_OK_AND_ASSIGN(std::vector<RulesCaseOutcome> o, RunRulesCaseFile(kCases));
  EXPECT_EQ(RulesOutcomeToJson(o[0])["type_str"], "float32[8@(z,a),4]");
  Json mixed = RulesOutcomeToJson(o[1]);
  EXPECT_EQ(mixed["type_str"], "float32[8@x,4]");
  EXPECT_EQ(mixed["spec"], Json::parse(R"(["x", null])"));
  Json all_auto = RulesOutcomeToJson(o[2]);
  EXPECT_EQ(all_auto["type_str"], "float32[8,8]") << all_auto.dump();
}

TEST(RulesCasesTest, ShardMapBodyTypeIsVarying) {
  const char* kCases = R"([
    {"id": "body", "op": "shard_map_body_type", "params": {"manual_axes": ["x"], "dtype": "int32"},
     "mesh": {"x": 2, "y": 2}, "inputs": [{"shape": [8, 2], "spec": ["x", "y"]}]}
  ])";
  ASSERT_OK_AND_ASSIGN(std::vector<RulesCaseOutcome> o, RunRulesCaseFile(kCases));
  Json j = RulesOutcomeToJson(o[0]);
  EXPECT_EQ(j["type_str"], "int32[4,2@y]{V:x}") << j.dump();
  EXPECT_EQ(j["varying"], Json::parse(R"(["x"])"));
}

}  // namespace
}  // namespace meshserve
