// BuildLoadedModel's checkpoint reading (model_loader.cc): params that are
// boxes (from / from_offset) of checkpoint tensors, on every device, through
// one file, an index json or a list of files; F16 widened; errors naming the
// param and the tensor. Expected values are computed from the written arrays.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/tensor/safetensors.h"
#include "server/worker/model_loader.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kRows = 4, kCols = 9;  // a fused [in, 3 * out] weight

float Fused(int64_t r, int64_t c) { return static_cast<float>(r * 100 + c); }

class ModelLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/loader_", getpid());
    std::filesystem::create_directories(dir_);
    std::vector<float> w(kRows * kCols), b(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) w[r * kCols + c] = Fused(r, c);
    }
    for (int64_t c = 0; c < kCols; ++c) b[c] = 0.5f * c;
    ASSERT_OK(WriteSafetensors(dir_ + "/w.safetensors",
                               {{"h.0.c_attn.weight",
                                 *Tensor::FromValues(DType::kFloat32, {kRows, kCols}, w)}}));
    ASSERT_OK(WriteSafetensors(dir_ + "/b.safetensors",
                               {{"h.0.c_attn.bias",
                                 *Tensor::FromValues(DType::kFloat16, {kCols}, b)},
                                {"other", *Tensor::FromValues(DType::kFloat32, {2}, {1, 2})}}));
    std::ofstream(dir_ + "/model.safetensors.index.json")
        << R"({"weight_map": {"h.0.c_attn.weight": "w.safetensors",
               "h.0.c_attn.bias": "b.safetensors", "other": "b.safetensors"}})";
  }

  // q/k/v [4, 3] at column offsets 0/3/6 sharded over x (3 over 2: device
  // 1's box [2, 4) is clamped to the param's edge [2, 3)), biases likewise.
  std::string ModelJson(const std::string& checkpoint, const std::string& extra = "") {
    const std::string text = absl::StrReplaceAll(R"({'name': 'm', 'mesh': {'x': 2}, 'checkpoint': CKPT,
      'inputs': {'a': {'shape': [-1, 4]}},
      'params': {
        'q': {'shape': [4, 3], 'sharding': [null, 'x'], 'from': 'h.0.c_attn.weight'},
        'k': {'shape': [4, 3], 'sharding': [null, 'x'], 'from': 'h.0.c_attn.weight',
              'from_offset': [0, 3]},
        'v': {'shape': [4, 3], 'sharding': ['x'], 'from': 'h.0.c_attn.weight',
              'from_offset': [0, 6]},
        'vb': {'shape': [3], 'sharding': ['x'], 'from': 'h.0.c_attn.bias', 'from_offset': [6],
               'dtype': 'F16'},
        'other': {'shape': [2]}, 'fresh': {'shape': [2], 'init': 'ones'} EXTRA},
      'layers': [{'name': 'y', 'op': 'linear', 'input': 'a', 'kernel': 'q'}],
      'outputs': ['y']})",
                               {{"CKPT", checkpoint}, {"EXTRA", extra}});
    return absl::StrReplaceAll(text, {{"'", "\""}});
  }

  absl::StatusOr<std::shared_ptr<const LoadedModel>> Load(const std::string& json) {
    LoadModelIr load;
    load.model = "m";
    load.generation = 1;
    load.model_json = json;
    load.model_dir = dir_;
    load.mesh = {MeshAxisIr{"x", 2, ""}};
    load.devices = {0, 1};
    load.device_workers = {0, 0};
    LoadContext context;
    context.worker_id = 0;
    absl::StatusOr<BuiltModel> built = BuildLoadedModel(load, context);
    if (!built.ok()) return built.status();
    return built->model;
  }

  // Checks param `name` on both devices: element (r, c) of its box equals
  // Fused(r + row0, c + col0).
  void ExpectBoxesOfFused(const LoadedModel& m, const std::string& name, int64_t col0) {
    for (int64_t device : {0, 1}) {
      const BoxTensor& t = *m.params.at(device).at(name);
      std::vector<float> got = t.tensor.ToFloatVector();
      const Box& box = t.box;
      size_t i = 0;
      for (int64_t r = box[0].begin; r < box[0].end; ++r) {
        for (int64_t c = box[1].begin; c < box[1].end; ++c) {
          ASSERT_EQ(got[i++], Fused(r, c + col0)) << name << " device " << device;
        }
      }
      ASSERT_EQ(i, got.size());
    }
  }

  void ExpectAll(const LoadedModel& m) {
    ExpectBoxesOfFused(m, "q", 0);
    ExpectBoxesOfFused(m, "k", 3);
    ExpectBoxesOfFused(m, "v", 6);
    EXPECT_EQ(m.params.at(1).at("k")->box, Box({{0, 4}, {2, 3}}));  // clamped at the edge
    EXPECT_EQ(m.params.at(1).at("k")->tensor.ToFloatVector(),
              (std::vector<float>{Fused(0, 5), Fused(1, 5), Fused(2, 5), Fused(3, 5)}));
    const BoxTensor& vb1 = *m.params.at(1).at("vb");
    EXPECT_EQ(vb1.tensor.dtype(), DType::kFloat32);  // F16 widened
    EXPECT_EQ(vb1.box, Box({{2, 3}}));
    EXPECT_EQ(vb1.tensor.ToFloatVector(), (std::vector<float>{0.5f * 8}));
    EXPECT_EQ(m.params.at(0).at("vb")->tensor.ToFloatVector(),
              (std::vector<float>{0.5f * 6, 0.5f * 7}));
    EXPECT_EQ(m.params.at(0).at("other")->tensor.ToFloatVector(), (std::vector<float>{1, 2}));
    EXPECT_EQ(m.params.at(0).at("fresh")->tensor.ToFloatVector(), (std::vector<float>{1, 1}));
  }

  std::string dir_;
};

TEST_F(ModelLoaderTest, BoxesOfATensorThroughAnIndexJson) {
  ASSERT_OK_AND_ASSIGN(auto m, Load(ModelJson("'model.safetensors.index.json'")));
  ExpectAll(*m);
}

TEST_F(ModelLoaderTest, BoxesOfATensorThroughAListOfFiles) {
  ASSERT_OK_AND_ASSIGN(auto m, Load(ModelJson("['w.safetensors', 'b.safetensors']")));
  ExpectAll(*m);
}

TEST_F(ModelLoaderTest, MissingSourceAndBoxOutsideItAreErrors) {
  absl::Status missing = Load(ModelJson("'w.safetensors'")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.message()),
              AllOf(HasSubstr("param 'vb'"), HasSubstr("from 'h.0.c_attn.bias': checkpoint"),
                    HasSubstr("has no such tensor")));
  EXPECT_THAT(Load(ModelJson("'model.safetensors.index.json'",
                             ", 'u': {'shape': [4, 3], 'from': 'h.0.c_attn.weight', "
                             "'from_offset': [0, 7]}")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the box at from_offset [0, 7] of shape [4, 3] is not inside"));
  EXPECT_THAT(Load(ModelJson("'model.safetensors.index.json'",
                             ", 'h.0.c_attn.weight': {'shape': [4, 8]}")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "with shape [4, 9] but the model declares [4, 8]"));
}

}  // namespace
}  // namespace meshserve
