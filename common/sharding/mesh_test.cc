#include "common/sharding/mesh.h"

#include <string>
#include <vector>

#include "absl/hash/hash_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

Mesh MakeMesh(std::vector<MeshAxis> axes) {
  auto mesh = Mesh::Create(std::move(axes));
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return mesh.ok() ? *mesh : Mesh();
}

TEST(MeshTest, CreateComputesDeviceCount) {
  Mesh mesh = MakeMesh({{"fsdp", 2}, {"model", 4}});
  EXPECT_EQ(mesh.num_devices(), 8);
  EXPECT_EQ(mesh.num_axes(), 2);
  EXPECT_EQ(mesh.AxisIndex("model"), 1);
  EXPECT_EQ(mesh.AxisIndex("data"), std::nullopt);
  EXPECT_TRUE(mesh.HasExplicitAxes());
}

TEST(MeshTest, DefaultIsEmptyWithOneDevice) {
  Mesh mesh;
  EXPECT_TRUE(mesh.empty());
  EXPECT_EQ(mesh.num_devices(), 1);
  EXPECT_FALSE(mesh.HasExplicitAxes());
  EXPECT_EQ(mesh.ToString(), "mesh[]");
}

TEST(MeshTest, CreateRejectsDuplicateAxisNames) {
  EXPECT_THAT(Mesh::Create({{"x", 2}, {"x", 4}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'x'"));
}

TEST(MeshTest, CreateRejectsEmptyAxisName) {
  EXPECT_THAT(Mesh::Create({{"", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "empty name"));
}

TEST(MeshTest, CreateRejectsNonIdentifierName) {
  EXPECT_THAT(Mesh::Create({{"a b", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "a b"));
  EXPECT_THAT(Mesh::Create({{"1x", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "1x"));
}

TEST(MeshTest, CreateRejectsSizeBelowOne) {
  EXPECT_THAT(Mesh::Create({{"x", 0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'x' has size 0"));
  EXPECT_THAT(Mesh::Create({{"y", -3}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'y' has size -3"));
}

TEST(MeshTest, CreateRejectsDeviceCountOverflow) {
  EXPECT_THAT(Mesh::Create({{"a", int64_t{1} << 40}, {"b", int64_t{1} << 40}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'b'"));
}

TEST(MeshTest, CoordsAreRowMajor) {
  Mesh mesh = MakeMesh({{"a", 2}, {"b", 4}});
  EXPECT_THAT(mesh.CoordsOfDevice(5), IsOkAndHolds(ElementsAre(1, 1)));
  EXPECT_THAT(mesh.CoordsOfDevice(3), IsOkAndHolds(ElementsAre(0, 3)));
  EXPECT_THAT(mesh.DeviceAtCoords({1, 1}), IsOkAndHolds(5));
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    EXPECT_THAT(mesh.DeviceAtCoords(mesh.UncheckedCoordsOfDevice(d)),
                IsOkAndHolds(d));
  }
}

TEST(MeshTest, CoordsOfDeviceRejectsOutOfRange) {
  Mesh mesh = MakeMesh({{"a", 2}, {"b", 4}});
  EXPECT_THAT(mesh.CoordsOfDevice(8),
              StatusIs(absl::StatusCode::kOutOfRange, "device 8"));
  EXPECT_THAT(mesh.CoordsOfDevice(-1), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(MeshTest, DeviceAtCoordsRejectsBadRankAndCoordinate) {
  Mesh mesh = MakeMesh({{"a", 2}, {"b", 4}});
  EXPECT_THAT(mesh.DeviceAtCoords({1}), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(mesh.DeviceAtCoords({0, 4}),
              StatusIs(absl::StatusCode::kOutOfRange, "'b'"));
  EXPECT_THAT(mesh.DeviceAtCoords({-1, 0}),
              StatusIs(absl::StatusCode::kOutOfRange, "'a'"));
}

TEST(MeshTest, ToStringShowsNonExplicitTypes) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 2, AxisType::kAuto}, {"z", 1, AxisType::kManual}});
  EXPECT_EQ(mesh.ToString(), "mesh[x=2,y=2:Auto,z=1:Manual]");
}

TEST(MeshTest, ParseRoundTrips) {
  for (const char* text :
       {"mesh[]", "mesh[fsdp=2,model=4]", "mesh[x=2,y=2:Auto]", "mesh[m=3:Manual]"}) {
    ASSERT_OK_AND_ASSIGN(Mesh mesh, ParseMesh(text));
    EXPECT_EQ(mesh.ToString(), text);
  }
}

TEST(MeshTest, ParseAcceptsSpacesAndNoPrefix) {
  EXPECT_THAT(ParseMesh(" [ a = 2 , b=4 : auto ] "),
              IsOkAndHolds(MakeMesh({{"a", 2}, {"b", 4, AxisType::kAuto}})));
  EXPECT_THAT(ParseMesh("a=2"), IsOkAndHolds(MakeMesh({{"a", 2}})));
}

TEST(MeshTest, ParseRejectsBadText) {
  EXPECT_THAT(ParseMesh("mesh[a=2"),
              StatusIs(absl::StatusCode::kInvalidArgument, "mesh[a=2"));
  EXPECT_THAT(ParseMesh("mesh[a]"), StatusIs(absl::StatusCode::kInvalidArgument, "\"a\""));
  EXPECT_THAT(ParseMesh("mesh[a=two]"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMesh("mesh[a=2:Fancy]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "Fancy"));
  EXPECT_THAT(ParseMesh("mesh[a=2,a=2]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "duplicate"));
  EXPECT_THAT(ParseMesh("meshy"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AxisTypeTest, NamesRoundTrip) {
  for (AxisType t : {AxisType::kExplicit, AxisType::kAuto, AxisType::kManual}) {
    EXPECT_THAT(ParseAxisType(AxisTypeName(t)), IsOkAndHolds(t));
  }
  EXPECT_THAT(ParseAxisType("AxisType.Auto"), IsOkAndHolds(AxisType::kAuto));
  EXPECT_THAT(ParseAxisType("Sideways"),
              StatusIs(absl::StatusCode::kInvalidArgument, "Sideways"));
}

TEST(MeshTest, WithAxisTypesChangesOnlyNamedAxes) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  Mesh auto_y = mesh.WithAxisTypes({"y", "nope"}, AxisType::kAuto);
  EXPECT_EQ(auto_y.axis(0).type, AxisType::kExplicit);
  EXPECT_EQ(auto_y.axis(1).type, AxisType::kAuto);
  EXPECT_EQ(auto_y.num_devices(), 8);
  EXPECT_NE(auto_y, mesh);
}

TEST(MeshAxisTest, HashIsCorrect) {
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly(
      {MeshAxis{"x", 2}, MeshAxis{"x", 4}, MeshAxis{"y", 2},
       MeshAxis{"x", 2, AxisType::kManual}}));
}

TEST(MeshTest, HashIsCorrect) {
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly({
      Mesh(), MakeMesh({{"x", 2}}), MakeMesh({{"x", 4}}),
      MakeMesh({{"x", 2, AxisType::kAuto}}), MakeMesh({{"x", 2}, {"y", 2}}),
      MakeMesh({{"y", 2}, {"x", 2}})}));
}

}  // namespace
}  // namespace meshserve
