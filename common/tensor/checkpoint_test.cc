// Checkpoint (checkpoint.h): one file, an index json and a list of files.
#include "common/tensor/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

std::string Dir() {
  std::string dir = absl::StrCat(::testing::TempDir(), "/ckpt_", getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

Tensor Values(std::vector<int64_t> shape, float base) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return *Tensor::FromValues(DType::kFloat32, shape, v);
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Dir();
    ASSERT_OK(WriteSafetensors(dir_ + "/a.safetensors", {{"x", Values({2, 3}, 0)},
                                                         {"y", Values({4}, 100)}}));
    ASSERT_OK(WriteSafetensors(dir_ + "/b.safetensors", {{"z", Values({3, 2}, 200)}}));
  }
  std::string dir_;
};

TEST_F(CheckpointTest, OneFile) {
  ASSERT_OK_AND_ASSIGN(Checkpoint c, Checkpoint::Open({dir_ + "/a.safetensors"}));
  ASSERT_NE(c.Find("x"), nullptr);
  EXPECT_EQ(c.Find("z"), nullptr);
  ASSERT_OK_AND_ASSIGN(Tensor t, c.ReadBox("x", Box({{1, 2}, {1, 3}})));
  EXPECT_EQ(t.ToFloatVector(), (std::vector<float>{4, 5}));
  EXPECT_THAT(c.ReadBox("z", Box({{0, 1}, {0, 1}})),
              StatusIs(absl::StatusCode::kNotFound, "no tensor 'z'"));
}

TEST_F(CheckpointTest, IndexJsonMapsTensorsToFilesInItsFolder) {
  Write(dir_ + "/model.safetensors.index.json",
        R"({"metadata": {"total_size": 72}, "weight_map": {"x": "a.safetensors",
            "y": "a.safetensors", "z": "b.safetensors"}})");
  ASSERT_OK_AND_ASSIGN(Checkpoint c, Checkpoint::Open({dir_ + "/model.safetensors.index.json"}));
  ASSERT_OK_AND_ASSIGN(Tensor z, c.ReadBox("z", Box({{2, 3}, {0, 2}})));
  EXPECT_EQ(z.ToFloatVector(), (std::vector<float>{204, 205}));
  ASSERT_OK_AND_ASSIGN(Tensor y, c.ReadBox("y", Box({{3, 4}})));
  EXPECT_EQ(y.ToFloatVector(), (std::vector<float>{103}));
  EXPECT_THAT(c.description(), HasSubstr("(2 files)"));
}

TEST_F(CheckpointTest, BadIndexesAreRejectedNamingTheValue) {
  const std::string index = dir_ + "/bad.index.json";
  Write(index, R"({"weight_map": {"x": "b.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open({index}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "maps 'x' to " + dir_ + "/b.safetensors, which has no such"));
  Write(index, R"({"weight_map": {"x": "../a.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open({index}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'../a.safetensors'"));
  Write(index, R"({"metadata": {}})");
  EXPECT_THAT(Checkpoint::Open({index}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no object 'weight_map'"));
  Write(index, R"({"weight_map": {"x": "missing.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open({index}), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CheckpointTest, ListOfFiles) {
  ASSERT_OK_AND_ASSIGN(Checkpoint c,
                       Checkpoint::Open({dir_ + "/a.safetensors", dir_ + "/b.safetensors"}));
  ASSERT_NE(c.FileOf("z"), nullptr);
  EXPECT_EQ(c.FileOf("z")->path(), dir_ + "/b.safetensors");
  ASSERT_OK_AND_ASSIGN(Tensor x, c.ReadBox("x", Box({{0, 1}, {0, 3}})));
  EXPECT_EQ(x.ToFloatVector(), (std::vector<float>{0, 1, 2}));
  EXPECT_THAT(Checkpoint::Open({dir_ + "/a.safetensors", dir_ + "/a.safetensors"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "tensor 'x' is in both"));
  EXPECT_THAT(Checkpoint::Open({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace meshserve
