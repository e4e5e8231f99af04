#include "common/json/sharding_json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

absl::StatusOr<PartitionSpec> Spec(const char* json) {
  return PartitionSpecFromJson(Json::parse(json), "spec");
}

TEST(MeshFromJsonTest, KeepsAxisOrderAndTypes) {
  const Json types = Json::parse(R"({"y": "Auto"})");
  ASSERT_OK_AND_ASSIGN(Mesh mesh, MeshFromJson(Json::parse(R"({"y": 2, "x": 4})"), "mesh", &types));
  ASSERT_EQ(mesh.num_axes(), 2);
  EXPECT_EQ(mesh.axis(0).name, "y");
  EXPECT_EQ(mesh.axis(0).type, AxisType::kAuto);
  EXPECT_EQ(mesh.axis(1).size, 4);
  EXPECT_EQ(mesh.axis(1).type, AxisType::kExplicit);
  ASSERT_OK_AND_ASSIGN(Mesh empty, MeshFromJson(Json(), "mesh"));
  EXPECT_TRUE(empty.empty());
}

TEST(MeshFromJsonTest, RejectsWithThePath) {
  EXPECT_THAT(MeshFromJson(Json(3), "src.mesh"),
              StatusIs(kInvalid, "src.mesh must be an object {\"axis\": size, ...}, got 3"));
  EXPECT_THAT(MeshFromJson(Json::parse(R"({"x": "two"})"), "mesh"),
              StatusIs(kInvalid, "mesh.x must be an integer"));
  EXPECT_THAT(MeshFromJson(Json::parse(R"({"x": 0})"), "src.mesh"), StatusIs(kInvalid, "src.mesh"));
  const Json bad_type = Json::parse(R"({"x": "Sideways"})");
  EXPECT_THAT(MeshFromJson(Json::parse(R"({"x": 2})"), "mesh", &bad_type),
              StatusIs(kInvalid, "Sideways"));
  const Json unknown = Json::parse(R"({"q": "Auto"})");
  EXPECT_THAT(MeshFromJson(Json::parse(R"({"x": 2})"), "mesh", &unknown),
              StatusIs(kInvalid, "mesh_axis_types names axis 'q'"));
}

TEST(PartitionSpecFromJsonTest, AcceptsTheOneGrammar) {
  ASSERT_OK_AND_ASSIGN(PartitionSpec list, Spec(R"(["x", null, ["y", "z"]])"));
  EXPECT_EQ(list.ToString(), "P('x', None, ('y', 'z'))");
  ASSERT_OK_AND_ASSIGN(PartitionSpec text, Spec(R"j("P('x', None)")j"));
  EXPECT_EQ(text.ToString(), "P('x', None)");
  ASSERT_OK_AND_ASSIGN(PartitionSpec object, Spec(R"({"spec": ["x"], "unreduced": ["y"]})"));
  EXPECT_THAT(object.entries(), ElementsAre(ElementsAre("x")));
  EXPECT_THAT(object.unreduced(), ElementsAre("y"));
  ASSERT_OK_AND_ASSIGN(PartitionSpec only_unreduced, Spec(R"({"unreduced": ["y"]})"));
  EXPECT_EQ(only_unreduced.size(), 0);
  EXPECT_THAT(only_unreduced.unreduced(), ElementsAre("y"));
  ASSERT_OK_AND_ASSIGN(PartitionSpec null_spec, Spec("null"));
  EXPECT_EQ(null_spec, PartitionSpec());
}

TEST(PartitionSpecFromJsonTest, RejectsWithThePathAndTheEntry) {
  EXPECT_THAT(Spec(R"(["x", 3])"),
              StatusIs(kInvalid, "spec entry 3 in [\"x\",3]: entry 1 must be null, an axis "
                                 "name or a list of axis names, got 3"));
  EXPECT_THAT(Spec(R"([[["x"]]])"), StatusIs(kInvalid, "tuples may not nest"));
  EXPECT_THAT(Spec(R"([""])"), StatusIs(kInvalid, "empty axis name"));
  EXPECT_THAT(Spec("3"), StatusIs(kInvalid, "spec must be a list (a PartitionSpec)"));
  EXPECT_THAT(Spec(R"({"specs": ["x"]})"), StatusIs(kInvalid, "unknown field 'specs'"));
  EXPECT_THAT(Spec(R"({"unreduced": [1]})"), StatusIs(kInvalid, "spec.unreduced must be a list"));
  EXPECT_THAT(Spec(R"j("P(x")j"), StatusIs(kInvalid, "spec: "));
}

TEST(PartitionSpecToJsonTest, WritesTheListFormAndRoundTrips) {
  EXPECT_EQ(PartitionSpecToJson(PartitionSpec()), Json::parse("[]"));
  const PartitionSpec spec({{"x"}, {}, {"y", "z"}});
  EXPECT_EQ(PartitionSpecToJson(spec), Json::parse(R"(["x", null, ["y", "z"]])"));
  const PartitionSpec unreduced({{}, {"x"}}, {"y"});
  EXPECT_EQ(PartitionSpecToJson(unreduced),
            Json::parse(R"({"spec": [null, "x"], "unreduced": ["y"]})"));
  for (const PartitionSpec& s : {PartitionSpec(), spec, unreduced}) {
    ASSERT_OK_AND_ASSIGN(PartitionSpec back, PartitionSpecFromJson(PartitionSpecToJson(s), "s"));
    EXPECT_EQ(back, s);
  }
}

TEST(ReshardEndpointFromJsonTest, DecodesAndValidates) {
  const int64_t shape[] = {4};
  ASSERT_OK_AND_ASSIGN(
      ReshardEndpoint ep,
      ReshardEndpointFromJson(Json::parse(R"({"mesh": {"x": 2}, "spec": ["x"]})"), "src",
                              shape, DType::kFloat32));
  EXPECT_EQ(ep.sharding.spec().ToString(), "P('x')");
  EXPECT_THAT(ep.device_workers, ElementsAre(0, 1));
  EXPECT_THAT(ReshardEndpointFromJson(Json::parse(R"({"spec": []})"), "src", shape,
                                      DType::kFloat32),
              StatusIs(kInvalid, "missing field 'mesh' in src"));
  EXPECT_THAT(ReshardEndpointFromJson(
                  Json::parse(R"({"mesh": {"x": 2}, "spec": [], "devices": [0, 1, 2]})"), "src",
                  shape, DType::kFloat32),
              StatusIs(kInvalid, "src.devices [0,1,2] has 3 entries"));
}

}  // namespace
}  // namespace meshserve
