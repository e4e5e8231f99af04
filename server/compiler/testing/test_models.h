// Model files, a full-tensor reference evaluator and a plan-vs-reference
// check shared by the compiler's tests (compiler_test.cc,
// lm_compiler_test.cc, layer_strategy_test.cc). Header-only, test use only.
#ifndef MESHSERVE_SERVER_COMPILER_TESTING_TEST_MODELS_H_
#define MESHSERVE_SERVER_COMPILER_TESTING_TEST_MODELS_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/status_macros.h"
#include "common/model/typed_model.h"
#include "common/tensor/kernels.h"
#include "common/tensor/tensor.h"
#include "gtest/gtest.h"
#include "server/compiler/layer_strategy.h"
#include "server/compiler/testing/reference_interpreter.h"

namespace meshserve {
namespace compiler_testing {

inline std::string Json(absl::string_view single_quoted) {
  return absl::StrReplaceAll(single_quoted, {{"'", "\""}});
}

// The seed's Linear: data=8, kernel P(None,'data'), x P('data'), out P('data')
// (x [-1, in], kernel [in, out]).
inline std::string SeedLinear(int in = 32, int out = 64) {
  return absl::StrReplaceAll(Json(R"({'name': 'linear', 'mesh': {'data': 8},
    'inputs': {'x': {'shape': [-1, IN], 'sharding': ['data']}},
    'params': {'kernel': {'shape': [IN, OUT], 'sharding': [null, 'data']},
               'bias': {'shape': [OUT]}},
    'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'kernel', 'bias': 'bias',
                'out_sharding': ['data']}],
    'outputs': ['y']})"),
                             {{"IN", std::to_string(in)}, {"OUT", std::to_string(out)}});
}

// The seed's SwiGLU block with small dims (D=d, F=f).
inline std::string Swiglu(int d, int f, absl::string_view y_out = "['fsdp', null, 'model']") {
  return absl::StrReplaceAll(Json(R"({'name': 'swiglu', 'mesh': {'fsdp': 2, 'model': 4},
    'inputs': {'x': {'shape': [-1, -1, DD], 'sharding': ['fsdp', null, null]}},
    'params': {
      'gate_proj.kernel': {'shape': [DD, FF], 'sharding': ['fsdp', 'model']},
      'up_proj.kernel':   {'shape': [DD, FF], 'sharding': ['fsdp', 'model']},
      'down_proj.kernel': {'shape': [FF, DD], 'sharding': ['model', 'fsdp']}},
    'layers': [
      {'name': 'gate', 'op': 'linear', 'input': 'x', 'kernel': 'gate_proj.kernel'},
      {'name': 'up',   'op': 'linear', 'input': 'x', 'kernel': 'up_proj.kernel'},
      {'name': 'act',  'op': 'silu',   'input': 'gate'},
      {'name': 'h',    'op': 'mul',    'inputs': ['act', 'up']},
      {'name': 'y',    'op': 'linear', 'input': 'h', 'kernel': 'down_proj.kernel',
       'out_sharding': YOUT}],
    'outputs': ['y']})"),
                             {{"DD", std::to_string(d)}, {"FF", std::to_string(f)},
                              {"YOUT", Json(y_out)}});
}

// A pre-norm transformer block: RMSNorm, attention (einsum/softmax/reshape),
// residual, RMSNorm, SwiGLU MLP, residual. D=16, 4 heads of 4, F=32.
inline std::string TransformerBlock() {
  return Json(R"({'name': 'block', 'mesh': {'data': 2, 'model': 4},
    'inputs': {'x': {'shape': [-1, 4, 16], 'sharding': ['data']}},
    'params': {
      'ln1.scale': {'shape': [16], 'init': 'ones'},
      'ln2.scale': {'shape': [16], 'init': 'ones'},
      'wq': {'shape': [16, 16], 'sharding': [null, 'model']},
      'wk': {'shape': [16, 16], 'sharding': [null, 'model']},
      'wv': {'shape': [16, 16], 'sharding': [null, 'model']},
      'wo': {'shape': [16, 16], 'sharding': ['model', null]},
      'w1': {'shape': [16, 32], 'sharding': [null, 'model']},
      'w3': {'shape': [16, 32], 'sharding': [null, 'model']},
      'w2': {'shape': [32, 16], 'sharding': ['model', null]}},
    'layers': [
      {'name': 'n1', 'op': 'rms_norm', 'input': 'x', 'scale': 'ln1.scale'},
      {'name': 'q', 'op': 'linear', 'input': 'n1', 'kernel': 'wq'},
      {'name': 'k', 'op': 'linear', 'input': 'n1', 'kernel': 'wk'},
      {'name': 'v', 'op': 'linear', 'input': 'n1', 'kernel': 'wv'},
      {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [-1, 4, 4, 4]},
      {'name': 'kh', 'op': 'reshape', 'input': 'k', 'shape': [-1, 4, 4, 4]},
      {'name': 'vh', 'op': 'reshape', 'input': 'v', 'shape': [-1, 4, 4, 4]},
      {'name': 's', 'op': 'einsum', 'equation': 'bqhd,bkhd->bhqk', 'inputs': ['qh', 'kh']},
      {'name': 'p', 'op': 'softmax', 'input': 's', 'axis': -1},
      {'name': 'o', 'op': 'einsum', 'equation': 'bhqk,bkhd->bqhd', 'inputs': ['p', 'vh']},
      {'name': 'o2', 'op': 'reshape', 'input': 'o', 'shape': [-1, 4, 16]},
      {'name': 'attn', 'op': 'linear', 'input': 'o2', 'kernel': 'wo', 'out_sharding': ['data']},
      {'name': 'h1', 'op': 'add', 'inputs': ['x', 'attn']},
      {'name': 'n2', 'op': 'rms_norm', 'input': 'h1', 'scale': 'ln2.scale'},
      {'name': 'gate', 'op': 'linear', 'input': 'n2', 'kernel': 'w1'},
      {'name': 'up', 'op': 'linear', 'input': 'n2', 'kernel': 'w3'},
      {'name': 'act', 'op': 'silu', 'input': 'gate'},
      {'name': 'hh', 'op': 'mul', 'inputs': ['act', 'up']},
      {'name': 'down', 'op': 'linear', 'input': 'hh', 'kernel': 'w2', 'out_sharding': ['data']},
      {'name': 'out', 'op': 'add', 'inputs': ['h1', 'down']}],
    'outputs': ['out']})");
}

// Grouped-query attention as one `attention` op (8 query heads of 4 over 4
// kv heads, GPT-2/Llama as the importer writes them), heads sharded over
// model, batch over data. D=32.
inline std::string AttentionBlock() {
  return Json(R"({'name': 'attn', 'mesh': {'data': 2, 'model': 4},
    'inputs': {'x': {'shape': [-1, 5, 32], 'sharding': ['data']}},
    'params': {
      'wq': {'shape': [32, 32], 'sharding': [null, 'model']},
      'wk': {'shape': [32, 16], 'sharding': [null, 'model']},
      'wv': {'shape': [32, 16], 'sharding': [null, 'model']},
      'wo': {'shape': [32, 32], 'sharding': ['model', null]}},
    'layers': [
      {'name': 'q', 'op': 'linear', 'input': 'x', 'kernel': 'wq'},
      {'name': 'k', 'op': 'linear', 'input': 'x', 'kernel': 'wk'},
      {'name': 'v', 'op': 'linear', 'input': 'x', 'kernel': 'wv'},
      {'name': 'qh', 'op': 'reshape', 'input': 'q', 'shape': [0, 0, 8, 4]},
      {'name': 'kh', 'op': 'reshape', 'input': 'k', 'shape': [0, 0, 4, 4]},
      {'name': 'vh', 'op': 'reshape', 'input': 'v', 'shape': [0, 0, 4, 4]},
      {'name': 'o', 'op': 'attention', 'inputs': ['qh', 'kh', 'vh'], 'scale': 0.4},
      {'name': 'o2', 'op': 'reshape', 'input': 'o', 'shape': [0, 0, 32]},
      {'name': 'y', 'op': 'linear', 'input': 'o2', 'kernel': 'wo', 'out_sharding': ['data']}],
    'outputs': ['y']})");
}

// The remaining ops: embed with a vocabulary-sharded table (partial sums),
// layer_norm, gelu, transpose, reshard, tanh, an einsum with a one-sided
// sharded contraction, relu.
inline std::string MiscOps() {
  return Json(R"({'name': 'misc', 'mesh': {'data': 2, 'model': 4},
    'inputs': {'ids': {'shape': [-1, 4], 'sharding': ['data'], 'dtype': 'int32'}},
    'params': {
      'table': {'shape': [32, 16], 'sharding': ['model', null]},
      'ln.scale': {'shape': [16]}, 'ln.bias': {'shape': [16]},
      'w': {'shape': [16, 8], 'sharding': [null, 'model']}},
    'layers': [
      {'name': 'e', 'op': 'embed', 'input': 'ids', 'table': 'table',
       'out_sharding': ['data', null, null]},
      {'name': 'n', 'op': 'layer_norm', 'input': 'e', 'scale': 'ln.scale', 'bias': 'ln.bias'},
      {'name': 'g', 'op': 'gelu', 'input': 'n'},
      {'name': 't', 'op': 'transpose', 'input': 'g', 'perm': [0, 2, 1]},
      {'name': 'r', 'op': 'reshard', 'input': 't', 'out_sharding': [null, 'model', null]},
      {'name': 'u', 'op': 'tanh', 'input': 'r'},
      {'name': 'z', 'op': 'einsum', 'equation': 'bdt,df->btf', 'inputs': ['u', 'w']},
      {'name': 'out', 'op': 'relu', 'input': 'z'}],
    'outputs': ['out', 'r']})");
}

// Deterministic values in [-1, 1).
inline Tensor RandomTensor(const std::vector<int64_t>& shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (float& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>((s >> 40) % 20000) / 10000.0f - 1.0f;
  }
  return *Tensor::FromValues(DType::kFloat32, shape, v);
}

inline std::map<std::string, Tensor> RandomParams(const ModelFile& m) {
  std::map<std::string, Tensor> out;
  uint64_t seed = 100;
  for (const ParamDef& p : m.params) out[p.name] = RandomTensor(p.shape, seed++);
  return out;
}

// Request inputs of `shapes`: int32 inputs get ids (i * 7 + 3) % 32 (inputs
// named "keep", a where mask, 1 except every third element), others
// RandomTensor.
inline std::map<std::string, Tensor> RandomInputs(
    const ModelFile& m, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, Tensor> inputs;
  uint64_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    if (m.FindInput(name)->dtype != DType::kInt32) {
      inputs[name] = RandomTensor(shape, seed++);
      continue;
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = name == "keep" ? (i % 3 != 1 ? 1 : 0) : static_cast<int32_t>((i * 7 + 3) % 32);
    }
    inputs[name] = *Tensor::FromInt32(shape, ids);
  }
  return inputs;
}

inline std::vector<int64_t> Positions(const std::string& labels, const std::string& of) {
  std::vector<int64_t> out;
  for (char c : of) out.push_back(static_cast<int64_t>(labels.find(c)));
  return out;
}

// jnp.einsum on full tensors through DotGeneral + Transpose.
inline absl::StatusOr<Tensor> ReferenceEinsum(const std::string& eq, const Tensor& a,
                                              const Tensor& b) {
  MS_ASSIGN_OR_RETURN(DotSpecLabels l, ParseEinsumLabels(eq));
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  std::string batch, contract, dot;
  for (char c : l.lhs) {
    if (has(l.rhs, c) && has(l.out, c)) batch += c;
    if (has(l.rhs, c) && !has(l.out, c)) contract += c;
  }
  dot = batch;
  for (char c : l.lhs) {
    if (!has(l.rhs, c)) dot += c;
  }
  for (char c : l.rhs) {
    if (!has(l.lhs, c)) dot += c;
  }
  MS_ASSIGN_OR_RETURN(Tensor r, DotGeneral(a, b, Positions(l.lhs, contract),
                                           Positions(l.rhs, contract), Positions(l.lhs, batch),
                                           Positions(l.rhs, batch), DType::kFloat32));
  if (dot == l.out) return r;
  return Transpose(r, Positions(dot, l.out));
}

// jax.nn.dot_product_attention(q, k, v, is_causal=True, scale) by its
// definition, in double: q [B, T, N, H], k and v [B, S, K, H], query head n
// reading kv head n / (N / K), query t seeing keys j <= t + S - T.
inline absl::StatusOr<Tensor> NaiveAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             double scale) {
  const int64_t B = q.dim(0), T = q.dim(1), N = q.dim(2), H = q.dim(3);
  const int64_t S = k.dim(1), K = k.dim(2), G = N / K;
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(H));
  Tensor out = Tensor::Zeros(DType::kFloat32, q.shape());
  const float* pq = q.data<float>();
  const float* pk = k.data<float>();
  const float* pv = v.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        const int64_t last = t + S - T;
        std::vector<double> w(last + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          double d = 0;
          for (int64_t h = 0; h < H; ++h) {
            d += double(pq[((b * T + t) * N + n) * H + h]) * pk[((b * S + j) * K + n / G) * H + h];
          }
          w[j] = d * scale;
          mx = std::max(mx, w[j]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t h = 0; h < H; ++h) {
          double acc = 0;
          for (int64_t j = 0; j <= last; ++j) acc += w[j] / sum * pv[((b * S + j) * K + n / G) * H + h];
          out.data<float>()[((b * T + t) * N + n) * H + h] = static_cast<float>(acc);
        }
      }
    }
  }
  return out;
}

// Evaluates the model on full tensors, layer by layer, with the kernels.
inline absl::StatusOr<std::map<std::string, Tensor>> Reference(
    const ModelFile& m, const std::map<std::string, Tensor>& inputs,
    const std::map<std::string, Tensor>& params) {
  std::map<std::string, Tensor> v = params;
  for (const auto& [n, t] : inputs) v[n] = t;
  const DType f32 = DType::kFloat32;
  for (const LayerDef& l : m.layers) {
    const Tensor& x = v.at(l.inputs[0]);
    absl::StatusOr<Tensor> r =
        absl::InternalError(absl::StrCat("op ", ModelOpName(l.kind), " has no reference"));
    switch (l.kind) {
      case ModelOp::kLinear:
        r = Linear(x, v.at(l.kernel), l.bias.empty() ? nullptr : &v.at(l.bias), f32);
        break;
      case ModelOp::kEinsum:
        r = ReferenceEinsum(l.equation, x, v.at(l.inputs[1]));
        if (r.ok() && !l.bias.empty()) r = Add(*r, v.at(l.bias), f32);
        break;
      case ModelOp::kEmbed: {
        BoxTensor table{Box::FromShape(v.at(l.table).shape()), v.at(l.table)};
        r = Embed(x, table, f32);
        break;
      }
      case ModelOp::kRmsNorm: r = RmsNorm(x, v.at(l.scale), l.epsilon, f32); break;
      case ModelOp::kLayerNorm:
        r = LayerNorm(x, v.at(l.scale), v.at(l.bias), l.epsilon, f32);
        break;
      case ModelOp::kSilu: r = Silu(x, f32); break;
      case ModelOp::kRelu: r = Relu(x, f32); break;
      case ModelOp::kGelu: r = Gelu(x, f32); break;
      case ModelOp::kTanh: r = Tanh(x, f32); break;
      case ModelOp::kAdd: r = Add(x, v.at(l.inputs[1]), f32); break;
      case ModelOp::kMul: r = Mul(x, v.at(l.inputs[1]), f32); break;
      case ModelOp::kSoftmax: {
        SoftmaxOptions o;
        o.scale = static_cast<float>(l.softmax_scale);
        o.causal = l.causal;
        r = MaskedSoftmax(x, l.axis, o, l.where.empty() ? nullptr : &v.at(l.where), f32);
        break;
      }
      case ModelOp::kPositions: r = ::meshserve::Positions(x.shape(), l.axis, 0); break;
      case ModelOp::kRope: r = Rope(x, l.seq_axis, 0, l.theta, f32); break;
      case ModelOp::kAttention:
        r = NaiveAttention(x, v.at(l.inputs[1]), v.at(l.inputs[2]), l.attention_scale);
        break;
      case ModelOp::kSelectRows:
      case ModelOp::kSample:
        break;  // generation ops: no reference here
      case ModelOp::kReshape: {
        std::vector<int64_t> shape = l.shape;
        for (size_t i = 0; i < shape.size(); ++i) {
          if (shape[i] == 0) shape[i] = x.dim(static_cast<int>(i));
        }
        r = Reshape(x, shape);
        break;
      }
      case ModelOp::kTranspose: r = Transpose(x, l.perm); break;
      case ModelOp::kReshard: r = x; break;
    }
    if (!r.ok()) return r.status();
    v[l.name] = *std::move(r);
  }
  std::map<std::string, Tensor> out;
  for (const std::string& o : m.outputs) out[o] = v.at(o);
  return out;
}

// Contiguous blocks of devices per worker (as placement.h deals them).
inline std::vector<int64_t> BlockWorkers(int64_t num_devices, int64_t num_workers) {
  std::vector<int64_t> w(num_devices);
  for (int64_t d = 0; d < num_devices; ++d) w[d] = d * num_workers / num_devices;
  return w;
}

inline float MaxAbsDiff(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.ToFloatVector(), y = b.ToFloatVector();
  if (x.size() != y.size()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

// Runs `cm` in the reference interpreter on RandomInputs and RandomParams and
// expects every output within 1e-4 of Reference (gtest assertions) and the
// interpreter's network bytes to equal the compiler's estimate.
inline void ExpectPlanMatchesReference(
    const ModelFile& m, const TypedModel& tm, const CompiledPlan& cm,
    const std::map<std::string, std::vector<int64_t>>& shapes, InterpreterStats* stats) {
  std::map<std::string, Tensor> inputs = RandomInputs(m, shapes);
  std::map<std::string, Tensor> params = RandomParams(m);
  auto got = RunCompiledPlan(cm, tm, inputs, params, stats);
  ASSERT_TRUE(got.ok()) << got.status() << "\n" << cm.ToString();
  absl::StatusOr<std::map<std::string, Tensor>> want = Reference(m, inputs, params);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const std::string& o : m.outputs) {
    ASSERT_EQ(got->at(o).shape(), want->at(o).shape()) << o;
    EXPECT_LT(MaxAbsDiff(got->at(o), want->at(o)), 1e-4) << o << "\n" << cm.ToString();
  }
  // The interpreter counts the bytes the programs really send across workers;
  // the compiler's per-request estimate must be exactly that.
  EXPECT_EQ(stats->network_bytes, cm.bytes_moved) << cm.ToString();
}

}  // namespace compiler_testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_TESTING_TEST_MODELS_H_
