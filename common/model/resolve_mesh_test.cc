#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/model_file.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

ModelFile WithMesh(absl::string_view mesh) {
  std::string text = absl::StrReplaceAll(
      R"({'name': 'm', 'mesh': MESH, 'inputs': {'x': {'shape': [-1, 4]}},
          'layers': [{'name': 'y', 'op': 'relu', 'input': 'x'}], 'outputs': ['y']})",
      {{"'", "\""}, {"MESH", mesh}});
  return *ParseModelFile(text, "");
}

TEST(ResolveMeshTest, FixedMeshIgnoresTheDeviceCount) {
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(WithMesh(R"({"fsdp": 2, "model": 4})"), 3));
  EXPECT_EQ(mesh.ToString(), "mesh[fsdp=2,model=4]");
}

TEST(ResolveMeshTest, MinusOneAxisTakesTheRest) {
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(WithMesh(R"({"data": -1, "model": 2})"), 8));
  EXPECT_EQ(mesh.ToString(), "mesh[data=4,model=2]");
  ASSERT_OK_AND_ASSIGN(Mesh one, ResolveMesh(WithMesh(R"({"data": -1, "model": 2})"), 2));
  EXPECT_EQ(one.ToString(), "mesh[data=1,model=2]");
}

TEST(ResolveMeshTest, MinusOneAxisNeedsADivisibleDeviceCount) {
  EXPECT_THAT(ResolveMesh(WithMesh(R"({"data": -1, "model": 2})"), 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "model 'm': mesh axis 'data' is -1 but the other axes (2 devices) do "
                       "not divide the 3 devices available"));
}

}  // namespace
}  // namespace meshserve
