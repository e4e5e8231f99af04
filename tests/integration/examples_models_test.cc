// The shipped example models type as JAX types them, and the files in
// models_bad/ are rejected with the right error. No processes: this is the
// in-process half of the end-to-end tests (test_*.py run the cluster).
#include <map>
#include <string>
#include <vector>

#include "common/model/model_file.h"
#include "common/model/typed_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

std::string ExamplePath(const std::string& name) {
  return std::string(MESHSERVE_SOURCE_DIR) + "/examples/models/" + name + ".json";
}
std::string BadPath(const std::string& name) {
  return std::string(MESHSERVE_SOURCE_DIR) + "/tests/integration/models_bad/" + name +
         ".json";
}

std::string TypeStr(const TypedModel& typed, const std::string& name) {
  const ArrayType* type = typed.Find(name);
  return type == nullptr ? "<missing>" : type->ToString();
}

TEST(ExampleModelsTest, LinearIsTheSeedsFirstExample) {
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath("linear")));
  EXPECT_OK(ValidateModel(model));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(model, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel typed, TypeModel(model, mesh, {{"x", {64, 32}}}));
  EXPECT_EQ(TypeStr(typed, "kernel"), "float32[32,32@data]");
  EXPECT_EQ(TypeStr(typed, "x"), "float32[64@data,32]");
  EXPECT_EQ(TypeStr(typed, "y"), "float32[64@data,32]");
}

TEST(ExampleModelsTest, SwigluTypesAsInTheSeed) {
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath("swiglu")));
  EXPECT_OK(ValidateModel(model));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(model, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel typed,
                       TypeModel(model, mesh, {{"x", {8, 4096, 2048}}}));
  EXPECT_EQ(TypeStr(typed, "gate"), "float32[8@fsdp,4096,8192@model]");
  EXPECT_EQ(TypeStr(typed, "up"), "float32[8@fsdp,4096,8192@model]");
  EXPECT_EQ(TypeStr(typed, "h"), "float32[8@fsdp,4096,8192@model]");
  EXPECT_EQ(TypeStr(typed, "y"), "float32[8@fsdp,4096,2048@model]");
  EXPECT_EQ(TypeStr(typed, "down_proj.kernel"), "float32[8192@model,2048@fsdp]");
}

TEST(ExampleModelsTest, SwigluPerRequestOutSharding) {
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath("swiglu")));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(model, 8));
  ASSERT_OK_AND_ASSIGN(PartitionSpec spec, ParsePartitionSpec("P('fsdp', None, None)"));
  ASSERT_OK_AND_ASSIGN(TypedModel typed,
                       TypeModel(model, mesh, {{"x", {8, 16, 2048}}}, {{"y", spec}}));
  EXPECT_EQ(TypeStr(typed, "y"), "float32[8@fsdp,16,2048]");
}

TEST(ExampleModelsTest, TransformerBlockTypes) {
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath("transformer")));
  EXPECT_OK(ValidateModel(model));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(model, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel typed, TypeModel(model, mesh, {{"x", {4, 16, 64}}}));
  EXPECT_EQ(TypeStr(typed, "q_flat"), "float32[4@fsdp,16,64@model]");
  EXPECT_EQ(TypeStr(typed, "q"), "float32[4@fsdp,16,4@model,16]");
  EXPECT_EQ(TypeStr(typed, "scores"), "float32[4@fsdp,4@model,16,16]");
  EXPECT_EQ(TypeStr(typed, "weights"), "float32[4@fsdp,4@model,16,16]");
  EXPECT_EQ(TypeStr(typed, "attn"), "float32[4@fsdp,16,4@model,16]");
  EXPECT_EQ(TypeStr(typed, "attn_flat"), "float32[4@fsdp,16,64@model]");
  EXPECT_EQ(TypeStr(typed, "attn_out"), "float32[4@fsdp,16,64]");
  EXPECT_EQ(TypeStr(typed, "gate"), "float32[4@fsdp,16,256@model]");
  EXPECT_EQ(TypeStr(typed, "y"), "float32[4@fsdp,16,64]");
}

TEST(ExampleModelsTest, TransformerNeedsItsOutShardings) {
  // Without out_sharding, o_proj is the seed's ambiguous down projection.
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath("transformer")));
  for (LayerDef& layer : model.layers) {
    if (layer.name == "attn_out") layer.out_sharding.reset();
  }
  EXPECT_THAT(ValidateModel(model),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Contracting dimensions are sharded"));
}

TEST(BadModelsTest, SwigluWithoutOutShardingIsRejectedAsJaxDoes) {
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(BadPath("swiglu_no_out_sharding")));
  absl::Status status = ValidateModel(model);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               "Contracting dimensions are sharded"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("'y'"));
}

TEST(BadModelsTest, MalformedFilesAreInvalidArgument) {
  EXPECT_THAT(LoadModelFile(BadPath("malformed_json")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LoadModelFile(BadPath("unknown_op")),
              StatusIs(absl::StatusCode::kInvalidArgument, "lineer"));
}

}  // namespace
}  // namespace meshserve
