// The shipped example models type as JAX types them, and the files in
// models_bad/ are rejected with the right error. No processes: this is the
// in-process half of the end-to-end tests (test_*.py run the cluster).
#include <map>
#include <string>
#include <utility>
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

using Shapes = std::map<std::string, std::vector<int64_t>>;
using Expected = std::vector<std::pair<std::string, std::string>>;

// Loads examples/models/<name>.json, checks that it validates, types it on
// 8 devices with `inputs` (and `out_shardings`) and expects each array's type.
void ExpectExampleTypes(const std::string& name, const Shapes& inputs, const Expected& expected,
                        const std::map<std::string, PartitionSpec>& out_shardings = {}) {
  SCOPED_TRACE(name);
  ASSERT_OK_AND_ASSIGN(ModelFile model, LoadModelFile(ExamplePath(name)));
  EXPECT_OK(ValidateModel(model));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(model, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel typed, TypeModel(model, mesh, inputs, out_shardings));
  for (const auto& [array, type] : expected) EXPECT_EQ(TypeStr(typed, array), type) << array;
}

TEST(ExampleModelsTest, LinearIsTheSeedsFirstExample) {
  ExpectExampleTypes("linear", {{"x", {64, 32}}},
                     {{"kernel", "float32[32,32@data]"},
                      {"x", "float32[64@data,32]"},
                      {"y", "float32[64@data,32]"}});
}

TEST(ExampleModelsTest, SwigluTypesAsInTheSeed) {
  ExpectExampleTypes("swiglu", {{"x", {8, 4096, 2048}}},
                     {{"gate", "float32[8@fsdp,4096,8192@model]"},
                      {"up", "float32[8@fsdp,4096,8192@model]"},
                      {"h", "float32[8@fsdp,4096,8192@model]"},
                      {"y", "float32[8@fsdp,4096,2048@model]"},
                      {"down_proj.kernel", "float32[8192@model,2048@fsdp]"}});
}

TEST(ExampleModelsTest, SwigluPerRequestOutSharding) {
  ASSERT_OK_AND_ASSIGN(PartitionSpec spec, ParsePartitionSpec("P('fsdp', None, None)"));
  ExpectExampleTypes("swiglu", {{"x", {8, 16, 2048}}}, {{"y", "float32[8@fsdp,16,2048]"}},
                     {{"y", spec}});
}

TEST(ExampleModelsTest, TransformerBlockTypes) {
  ExpectExampleTypes("transformer", {{"x", {4, 16, 64}}},
                     {{"q_flat", "float32[4@fsdp,16,64@model]"},
                      {"q", "float32[4@fsdp,16,4@model,16]"},
                      {"scores", "float32[4@fsdp,4@model,16,16]"},
                      {"weights", "float32[4@fsdp,4@model,16,16]"},
                      {"attn", "float32[4@fsdp,16,4@model,16]"},
                      {"attn_flat", "float32[4@fsdp,16,64@model]"},
                      {"attn_out", "float32[4@fsdp,16,64]"},
                      {"gate", "float32[4@fsdp,16,256@model]"},
                      {"y", "float32[4@fsdp,16,64]"}});
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
