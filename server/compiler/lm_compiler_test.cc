// The language-model ops compiled and run (reference_interpreter.h) on 1, 2
// and 4 workers against the full-tensor reference (test_models.h): a
// Llama-style block (GQA reshape with 0s, rope, causal scaled softmax, [out,
// in] param operands, einsum bias, tied head), a GPT-2-style one (positions,
// learned positional embeddings, layer_norm, gelu, softmax with where), and a
// sequence-sharded case where positions, rope and the causal mask need each
// shard's global offset.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compiler/compiler.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT

std::string LlamaBlock() {
  return Json(R"({'name': 'llama', 'mesh': {'data': 2, 'model': 2},
    'inputs': {'ids': {'shape': [-1, -1], 'sharding': ['data'], 'dtype': 'int32'}},
    'params': {
      'emb': {'shape': [32, 16]}, 'norm': {'shape': [16]},
      'wq': {'shape': [16, 16], 'sharding': ['model']},
      'wk': {'shape': [8, 16], 'sharding': ['model']},
      'wv': {'shape': [8, 16], 'sharding': ['model']}, 'bv': {'shape': [8], 'sharding': ['model']},
      'wo': {'shape': [16, 16], 'sharding': [null, 'model']}},
    'layers': [
      {'name': 'tok', 'op': 'embed', 'input': 'ids', 'table': 'emb'},
      {'name': 'n', 'op': 'rms_norm', 'input': 'tok', 'scale': 'norm'},
      {'name': 'q', 'op': 'einsum', 'equation': 'bsi,oi->bso', 'inputs': ['n', 'wq']},
      {'name': 'k', 'op': 'einsum', 'equation': 'bsi,oi->bso', 'inputs': ['n', 'wk']},
      {'name': 'v', 'op': 'einsum', 'equation': 'bsi,oi->bso', 'inputs': ['n', 'wv'], 'bias': 'bv'},
      {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 2, 2, 4]},
      {'name': 'kh', 'op': 'reshape', 'input': 'k', 'shape': [0, 0, 2, 4]},
      {'name': 'vh', 'op': 'reshape', 'input': 'v', 'shape': [0, 0, 2, -1]},
      {'name': 'qr', 'op': 'rope', 'input': 'qh', 'theta': 10000.0, 'seq_axis': 1},
      {'name': 'kr', 'op': 'rope', 'input': 'kh', 'theta': 10000.0, 'seq_axis': 1},
      {'name': 's', 'op': 'einsum', 'equation': 'bqngd,bknd->bngqk', 'inputs': ['qr', 'kr']},
      {'name': 'p', 'op': 'softmax', 'input': 's', 'scale': 0.5, 'causal': true},
      {'name': 'o', 'op': 'einsum', 'equation': 'bngqk,bknd->bqngd', 'inputs': ['p', 'vh']},
      {'name': 'o2', 'op': 'reshape', 'input': 'o', 'shape': [0, 0, 16]},
      {'name': 'attn', 'op': 'einsum', 'equation': 'bsi,oi->bso', 'inputs': ['o2', 'wo'],
       'out_sharding': ['data']},
      {'name': 'h', 'op': 'add', 'inputs': ['tok', 'attn']},
      {'name': 'logits', 'op': 'einsum', 'equation': 'bsd,vd->bsv', 'inputs': ['h', 'emb']}],
    'outputs': ['logits', 'p']})");
}

std::string Gpt2Block() {
  return Json(R"({'name': 'gpt2', 'mesh': {'data': 2, 'model': 2},
    'inputs': {'ids': {'shape': [-1, -1], 'sharding': ['data'], 'dtype': 'int32'},
               'keep': {'shape': [-1, 1, 1, -1], 'sharding': ['data'], 'dtype': 'int32'}},
    'params': {
      'wte': {'shape': [32, 8]}, 'wpe': {'shape': [16, 8]},
      'ln.w': {'shape': [8]}, 'ln.b': {'shape': [8]},
      'wqk': {'shape': [8, 8], 'sharding': [null, 'model']},
      'bqk': {'shape': [8], 'sharding': ['model']}},
    'layers': [
      {'name': 'pos', 'op': 'positions', 'input': 'ids', 'axis': -1},
      {'name': 'tok', 'op': 'embed', 'input': 'ids', 'table': 'wte'},
      {'name': 'pe', 'op': 'embed', 'input': 'pos', 'table': 'wpe'},
      {'name': 'x', 'op': 'add', 'inputs': ['tok', 'pe']},
      {'name': 'a', 'op': 'layer_norm', 'input': 'x', 'scale': 'ln.w', 'bias': 'ln.b',
       'epsilon': 1e-5},
      {'name': 'q', 'op': 'linear', 'input': 'a', 'kernel': 'wqk', 'bias': 'bqk'},
      {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 2, 4]},
      {'name': 's', 'op': 'einsum', 'equation': 'bqhd,bkhd->bhqk', 'inputs': ['qh', 'qh']},
      {'name': 'p', 'op': 'softmax', 'input': 's', 'axis': -1, 'scale': 0.5, 'causal': true,
       'where': 'keep'},
      {'name': 'g', 'op': 'gelu', 'input': 'a'},
      {'name': 'logits', 'op': 'einsum', 'equation': 'bsd,vd->bsv', 'inputs': ['g', 'wte']}],
    'outputs': ['logits', 'p', 'pos']})");
}

// The sequence dim sharded: every op that counts positions needs its offset.
std::string SequenceSharded() {
  return Json(R"({'name': 'seq', 'mesh': {'data': 4},
    'inputs': {'x': {'shape': [-1, -1, 2, 4], 'sharding': [null, 'data']},
               'kv': {'shape': [-1, -1, 2, 4]}},
    'layers': [
      {'name': 'pos', 'op': 'positions', 'input': 'x', 'axis': 1},
      {'name': 'r', 'op': 'rope', 'input': 'x', 'theta': 100.0, 'seq_axis': 1},
      {'name': 'rk', 'op': 'rope', 'input': 'kv', 'theta': 100.0, 'seq_axis': -3},
      {'name': 's', 'op': 'einsum', 'equation': 'bqhd,bkhd->bhqk', 'inputs': ['r', 'rk']},
      {'name': 'p', 'op': 'softmax', 'input': 's', 'causal': true, 'scale': 0.25}],
    'outputs': ['p', 'pos', 'r']})");
}

void Check(const std::string& json, const std::map<std::string, std::vector<int64_t>>& shapes,
           int num_workers, const std::map<std::string, std::string>& expect_types = {}) {
  SCOPED_TRACE(std::to_string(num_workers) + " workers");
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 4));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, shapes));
  for (const auto& [name, type] : expect_types) EXPECT_EQ(tm.TypeOf(name).ToString(), type);
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm,
                       CompileModel(tm, BlockWorkers(mesh.num_devices(), num_workers), {"p", 1}));
  InterpreterStats stats;
  ExpectPlanMatchesReference(m, tm, cm, shapes, &stats);
}

class LmCompilerTest : public ::testing::TestWithParam<int> {};

TEST_P(LmCompilerTest, LlamaBlock) {
  Check(LlamaBlock(), {{"ids", {4, 6}}}, GetParam(),
        {{"qh", "float32[4@data,6,2@model,2,4]"},
         {"s", "float32[4@data,2@model,2,6,6]"},
         {"logits", "float32[4@data,6,32]"}});
}

TEST_P(LmCompilerTest, Gpt2Block) {
  Check(Gpt2Block(), {{"ids", {2, 5}}, {"keep", {2, 1, 1, 5}}}, GetParam(),
        {{"pos", "int32[2@data,5]"}, {"p", "float32[2@data,2@model,5,5]"}});
}

TEST_P(LmCompilerTest, SequenceShardedPositionsRopeAndCausalMask) {
  Check(SequenceSharded(), {{"x", {2, 8, 2, 4}}, {"kv", {2, 8, 2, 4}}}, GetParam(),
        {{"pos", "int32[2,8@data,2,4]"}, {"p", "float32[2,2,8@data,8]"}});
}

INSTANTIATE_TEST_SUITE_P(Workers, LmCompilerTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace meshserve
