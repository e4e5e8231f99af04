// DecodeVariant's LM head on a mesh: each device reads 1/W of the head (its
// vocabulary slice when W divides the vocabulary, else its slice of the
// features, partial logits all-reduced by sample's gather), and the sampled
// records equal greedy sampling of the full model's logits (the full-tensor
// reference of test_models.h) on 1, 2 and 4 workers. Also the imported
// GPT-2 small and Llama files: their head's per-device bytes fall to 1/W.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/compiler/compiler.h"
#include "server/compiler/decode_model.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT

// A one-block LM (embed, attention, tied head) with vocabulary VOCAB, d = 8.
std::string TinyLm(int vocab) {
  return absl::StrReplaceAll(Json(R"({'name': 'tiny', 'mesh': {'model': -1},
    'inputs': {'ids': {'shape': [-1, -1], 'dtype': 'int32'}},
    'params': {
      'wte': {'shape': [VOCAB, 8]},
      'wq': {'shape': [8, 8], 'sharding': [null, 'model']},
      'wk': {'shape': [8, 8], 'sharding': [null, 'model']},
      'wv': {'shape': [8, 8], 'sharding': [null, 'model']}},
    'layers': [
      {'name': 'tok', 'op': 'embed', 'input': 'ids', 'table': 'wte'},
      {'name': 'q', 'op': 'einsum', 'equation': 'bsd,de->bse', 'inputs': ['tok', 'wq']},
      {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 4, 2]},
      {'name': 'k', 'op': 'einsum', 'equation': 'bsd,de->bse', 'inputs': ['tok', 'wk']},
      {'name': 'kh', 'op': 'reshape', 'input': 'k', 'shape': [0, 0, 4, 2]},
      {'name': 'v', 'op': 'einsum', 'equation': 'bsd,de->bse', 'inputs': ['tok', 'wv']},
      {'name': 'vh', 'op': 'reshape', 'input': 'v', 'shape': [0, 0, 4, 2]},
      {'name': 'o', 'op': 'attention', 'inputs': ['qh', 'kh', 'vh'], 'scale': 0.5},
      {'name': 'o2', 'op': 'reshape', 'input': 'o', 'shape': [0, 0, 8]},
      {'name': 'h', 'op': 'add', 'inputs': ['tok', 'o2'], 'out_sharding': [null, null, null]},
      {'name': 'logits', 'op': 'einsum', 'equation': 'bsd,vd->bsv', 'inputs': ['h', 'wte'],
       'auto_axes': true, 'out_sharding': [null, null, null]}],
    'outputs': ['logits']})"),
                             {{"VOCAB", std::to_string(vocab)}});
}

struct CompiledVariant {
  ModelFile file;
  TypedModel typed;
  CompiledPlan plan;
  const LayerPlanInfo* head = nullptr;
};

// The decode variant of `model` (T token slots, R rows) on `num_workers`
// workers of one device each.
absl::StatusOr<CompiledVariant> Compile(const ModelFile& model, int64_t slots, int64_t rows,
                                        int num_workers) {
  CompiledVariant c;
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(model, num_workers));
  MS_ASSIGN_OR_RETURN(c.file, DecodeVariant(model, slots, rows, &mesh));
  MS_ASSIGN_OR_RETURN(c.typed, TypeModel(c.file, mesh, {{c.file.inputs[0].name, {1, slots}}}));
  MS_ASSIGN_OR_RETURN(c.plan, CompileModel(c.typed, BlockWorkers(num_workers, num_workers),
                                           {"decode", 1}));
  return c;
}

const LayerPlanInfo* FindLayer(const CompiledPlan& plan, const std::string& name) {
  for (const LayerPlanInfo& info : plan.layers) {
    if (info.layer == name) return &info;
  }
  return nullptr;
}

// The head's bytes one device reads per step: its GEMM flops / (2 R) floats.
int64_t HeadBytesPerDevice(const CompiledPlan& plan, const std::string& head, int64_t rows) {
  const LayerPlanInfo* info = FindLayer(plan, head);
  return info == nullptr ? -1 : info->max_device_flops / (2 * rows) * 4;
}

class DecodeHeadTest : public ::testing::TestWithParam<int> {};

// The head's spec on the mesh, its per-device bytes, and the sampled records
// against the full model: greedy tokens are the argmax of the reference
// logits' last R rows.
void CheckTinyLm(int vocab, int workers, const std::string& want_spec) {
  SCOPED_TRACE("vocab " + std::to_string(vocab) + ", " + std::to_string(workers) + " workers");
  constexpr int64_t kSlots = 5, kRows = 3;
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(TinyLm(vocab), ""));
  ASSERT_OK_AND_ASSIGN(CompiledVariant c, Compile(m, kSlots, kRows, workers));
  EXPECT_EQ(c.typed.TypeOf("logits").spec().ToString(), want_spec);
  EXPECT_EQ(HeadBytesPerDevice(c.plan, "logits", kRows), vocab * 8 * 4 / workers);

  const std::map<std::string, std::vector<int64_t>> shapes = {{"ids", {1, kSlots}}};
  const std::map<std::string, Tensor> inputs = RandomInputs(m, shapes);
  const std::map<std::string, Tensor> params = RandomParams(m);
  ASSERT_OK_AND_ASSIGN(auto want, Reference(m, inputs, params));
  ASSERT_OK_AND_ASSIGN(auto got, RunCompiledPlan(c.plan, c.typed, inputs, params));
  const std::vector<float> logits = want.at("logits").ToFloatVector();
  const std::vector<float> records = got.at(kDecodeOutput).ToFloatVector();
  ASSERT_EQ(records.size(), static_cast<size_t>(kRows * 42));
  for (int64_t r = 0; r < kRows; ++r) {
    const float* row = logits.data() + (kSlots - kRows + r) * vocab;
    const int64_t argmax = std::max_element(row, row + vocab) - row;
    EXPECT_EQ(records[r * 42], static_cast<float>(argmax)) << "row " << r;
  }
}

TEST_P(DecodeHeadTest, VocabularyDividesShardsTheVocabulary) {
  CheckTinyLm(32, GetParam(),
              GetParam() == 1 ? "P(None, None, None)" : "P(None, None, 'model')");
}

TEST_P(DecodeHeadTest, VocabularyNotDividingShardsTheFeatures) {
  CheckTinyLm(37, GetParam(),
              GetParam() == 1 ? "P(None, None, None)"
                              : "P(None, None, None, unreduced={'model'})");
}

INSTANTIATE_TEST_SUITE_P(Workers, DecodeHeadTest, ::testing::Values(1, 2, 4));

TEST(DecodeVariantTest, WithoutAMeshTheHeadIsUnchanged) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(TinyLm(32), ""));
  ASSERT_OK_AND_ASSIGN(ModelFile v, DecodeVariant(m, 4, 2));
  const LayerDef* head = v.FindLayer("logits");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->inputs[0], "decode.rows");
  EXPECT_EQ(head->out_sharding->ToString(), "P(None, None, None)");
}

std::string ReadExample(const std::string& name) {
  std::ifstream f(std::string(MESHSERVE_SOURCE_DIR) + "/examples/lm/" + name + ".json");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The imported checkpoints' layouts (random weights: compiled, not run):
// GPT-2 small's head is 50257 x 768 floats (154 MB) per device on one
// worker, 1/W of it on W.
TEST(DecodeVariantTest, ImportedModelsReadOneWthOfTheHead) {
  for (const std::string name : {"gpt2_small", "llama_small"}) {
    ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(ReadExample(name), ""));
    ASSERT_OK_AND_ASSIGN(LmShape lm, InspectLm(m));
    const ParamDef* table = m.FindParam(m.FindLayer(m.outputs[0])->inputs[1]);
    ASSERT_NE(table, nullptr) << name;
    const int64_t head_bytes = lm.vocab_size * table->shape[1] * 4;
    for (int workers : {1, 2, 4}) {
      ASSERT_OK_AND_ASSIGN(CompiledVariant c, Compile(m, 4, 2, workers));
      EXPECT_EQ(HeadBytesPerDevice(c.plan, m.outputs[0], 2), head_bytes / workers)
          << name << " on " << workers << " workers\n" << c.plan.ToString();
    }
  }
}

}  // namespace
}  // namespace meshserve
