#include "common/tensor/kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/tensor/gemm_small_m.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Pointwise;

Tensor Random(DType dtype, std::vector<int64_t> shape, std::mt19937* rng) {
  Tensor t = Tensor::Zeros(DType::kFloat32, shape);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(t.NumElements());
  for (float& x : v) x = dist(*rng);
  return *Tensor::FromValues(dtype, shape, v);
}

std::vector<int64_t> Unflatten(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

int64_t Flatten(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Straight from the jax.lax.dot_general definition, in double.
std::vector<double> NaiveDotGeneral(const Tensor& lhs, const Tensor& rhs,
                                    std::vector<int64_t> lc, std::vector<int64_t> rc,
                                    std::vector<int64_t> lb, std::vector<int64_t> rb,
                                    std::vector<int64_t>* out_shape) {
  auto free_dims = [](int rank, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    std::vector<int64_t> f;
    for (int d = 0; d < rank; ++d) {
      if (std::find(a.begin(), a.end(), d) == a.end() &&
          std::find(b.begin(), b.end(), d) == b.end()) {
        f.push_back(d);
      }
    }
    return f;
  };
  const std::vector<int64_t> lf = free_dims(lhs.rank(), lc, lb), rf = free_dims(rhs.rank(), rc, rb);
  out_shape->clear();
  for (int64_t d : lb) out_shape->push_back(lhs.dim(d));
  for (int64_t d : lf) out_shape->push_back(lhs.dim(d));
  for (int64_t d : rf) out_shape->push_back(rhs.dim(d));
  std::vector<int64_t> cshape;
  for (int64_t d : lc) cshape.push_back(lhs.dim(d));
  int64_t out_n = 1, k_n = 1;
  for (int64_t s : *out_shape) out_n *= s;
  for (int64_t s : cshape) k_n *= s;
  const std::vector<float> L = lhs.ToFloatVector(), R = rhs.ToFloatVector();
  std::vector<double> out(out_n, 0.0);
  for (int64_t o = 0; o < out_n; ++o) {
    const std::vector<int64_t> oi = Unflatten(o, *out_shape);
    std::vector<int64_t> li(lhs.rank()), ri(rhs.rank());
    size_t p = 0;
    for (size_t i = 0; i < lb.size(); ++i, ++p) li[lb[i]] = ri[rb[i]] = oi[p];
    for (int64_t d : lf) li[d] = oi[p++];
    for (int64_t d : rf) ri[d] = oi[p++];
    double sum = 0;
    for (int64_t k = 0; k < k_n; ++k) {
      const std::vector<int64_t> ki = Unflatten(k, cshape);
      for (size_t i = 0; i < lc.size(); ++i) li[lc[i]] = ri[rc[i]] = ki[i];
      sum += static_cast<double>(L[Flatten(li, lhs.shape())]) * R[Flatten(ri, rhs.shape())];
    }
    out[o] = sum;
  }
  return out;
}

void ExpectDotMatches(const Tensor& lhs, const Tensor& rhs, std::vector<int64_t> lc,
                      std::vector<int64_t> rc, std::vector<int64_t> lb, std::vector<int64_t> rb,
                      DType out_dtype = DType::kFloat32) {
  std::vector<int64_t> shape;
  const std::vector<double> want = NaiveDotGeneral(lhs, rhs, lc, rc, lb, rb, &shape);
  ASSERT_OK_AND_ASSIGN(Tensor got, DotGeneral(lhs, rhs, lc, rc, lb, rb, out_dtype));
  ASSERT_EQ(got.shape(), shape);
  ASSERT_EQ(got.dtype(), out_dtype);
  const double tol = out_dtype == DType::kBFloat16 ? 2e-2 : 1e-4;
  for (int64_t i = 0; i < got.NumElements(); ++i) {
    ASSERT_NEAR(got.GetFloat(i), want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(DotGeneralTest, PlainMatmul) {
  std::mt19937 rng(1);
  ExpectDotMatches(Random(DType::kFloat32, {5, 7}, &rng), Random(DType::kFloat32, {7, 3}, &rng),
                   {1}, {0}, {}, {});
}

TEST(DotGeneralTest, TransposedOperandsUseFlags) {
  std::mt19937 rng(2);
  // lhs [K, M], rhs [N, K]
  ExpectDotMatches(Random(DType::kFloat32, {7, 5}, &rng), Random(DType::kFloat32, {3, 7}, &rng),
                   {0}, {1}, {}, {});
}

TEST(DotGeneralTest, BatchDimsAndOddPermutations) {
  std::mt19937 rng(3);
  // lhs [k1, b, m, k2], rhs [n, k2, b, k1]: batch not leading, two contracting dims.
  const Tensor lhs = Random(DType::kFloat32, {3, 2, 5, 4}, &rng);
  const Tensor rhs = Random(DType::kFloat32, {6, 4, 2, 3}, &rng);
  ExpectDotMatches(lhs, rhs, {0, 3}, {3, 1}, {1}, {2});
  // Contracting order reversed on both sides: same math.
  ExpectDotMatches(lhs, rhs, {3, 0}, {1, 3}, {1}, {2});
}

TEST(DotGeneralTest, AttentionLikeEinsums) {
  std::mt19937 rng(4);
  // 'bqhd,bkhd->bhqk'
  const Tensor q = Random(DType::kFloat32, {2, 5, 3, 4}, &rng);
  const Tensor k = Random(DType::kFloat32, {2, 6, 3, 4}, &rng);
  ExpectDotMatches(q, k, {3}, {3}, {0, 2}, {0, 2});
  // 'bhqk,bkhd->bhqd' as dot_general(p, v, ((3),(1)), ((0,1),(0,2)))
  const Tensor p = Random(DType::kFloat32, {2, 3, 5, 6}, &rng);
  const Tensor v = Random(DType::kFloat32, {2, 6, 3, 4}, &rng);
  ExpectDotMatches(p, v, {3}, {1}, {0, 1}, {0, 2});
}

TEST(DotGeneralTest, RandomConfigurations) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 60; ++iter) {
    const int nb = rng() % 2, nc = 1 + rng() % 2, nlf = rng() % 3, nrf = rng() % 3;
    std::vector<int64_t> bsz, csz, lfsz, rfsz;
    for (int i = 0; i < nb; ++i) bsz.push_back(1 + rng() % 3);
    for (int i = 0; i < nc; ++i) csz.push_back(1 + rng() % 4);
    for (int i = 0; i < nlf; ++i) lfsz.push_back(1 + rng() % 4);
    for (int i = 0; i < nrf; ++i) rfsz.push_back(1 + rng() % 4);
    // Random positions of each role in each operand.
    auto layout = [&](const std::vector<int64_t>& free_sz, std::vector<int64_t>* shape,
                      std::vector<int64_t>* b, std::vector<int64_t>* c) {
      const int rank = nb + nc + static_cast<int>(free_sz.size());
      std::vector<int64_t> pos(rank);
      std::iota(pos.begin(), pos.end(), 0);
      std::shuffle(pos.begin(), pos.end(), rng);
      shape->assign(rank, 0);
      int p = 0;
      for (int i = 0; i < nb; ++i, ++p) { (*shape)[pos[p]] = bsz[i]; b->push_back(pos[p]); }
      for (int i = 0; i < nc; ++i, ++p) { (*shape)[pos[p]] = csz[i]; c->push_back(pos[p]); }
      for (int64_t s : free_sz) (*shape)[pos[p++]] = s;
    };
    std::vector<int64_t> ls, rs, lb, rb, lc, rc;
    layout(lfsz, &ls, &lb, &lc);
    layout(rfsz, &rs, &rb, &rc);
    const DType lt = iter % 3 == 0 ? DType::kBFloat16 : DType::kFloat32;
    SCOPED_TRACE(::testing::Message() << "iter " << iter);
    ExpectDotMatches(Random(lt, ls, &rng), Random(DType::kFloat32, rs, &rng), lc, rc, lb, rb,
                     iter % 4 == 1 ? DType::kBFloat16 : DType::kFloat32);
  }
}

TEST(DotGeneralTest, LargerGemmMatchesNaive) {
  std::mt19937 rng(6);
  ExpectDotMatches(Random(DType::kBFloat16, {67, 129}, &rng),
                   Random(DType::kBFloat16, {129, 33}, &rng), {1}, {0}, {}, {});
}

TEST(DotGeneralTest, NarrowWeightsAreWidenedByPanels) {
  // N = 8200 is 17 blocks of columns (the last ragged), in the [K, N] and the
  // transposed [N, K] layout, batched too. (M = 3 bf16 weights take the
  // small-M kernel since issue 9; f16 and f64 still widen by blocks.)
  std::mt19937 rng(7);
  for (DType wt : {DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    SCOPED_TRACE(std::string(DTypeName(wt)));
    ExpectDotMatches(Random(DType::kFloat32, {3, 129}, &rng), Random(wt, {129, 8200}, &rng),
                     {1}, {0}, {}, {});
    ExpectDotMatches(Random(DType::kFloat32, {3, 129}, &rng), Random(wt, {8200, 129}, &rng),
                     {1}, {1}, {}, {});
  }
  ExpectDotMatches(Random(DType::kBFloat16, {2, 129, 3}, &rng),
                   Random(DType::kBFloat16, {2, 129, 4100}, &rng), {1}, {1}, {0}, {0},
                   DType::kBFloat16);
}

TEST(DotGeneralTest, EveryShapeClassMatchesNaive) {
  // M = 1 (sgemv), 2..16 (GemmSmallM), 17 and up (sgemm) for float32 weights;
  // bfloat16 weights: GemmSmallM up to 128, widening by panels at 129. In
  // [K, N] and transposed [N, K], odd N and K; lhs transposed too.
  std::mt19937 rng(8);
  for (int64_t m : {1, 2, 3, 7, 8, 15, 16, 17, 33, 127, 128, 129}) {
    for (DType wt : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << "M=" << m << " " << DTypeName(wt));
      const Tensor x = Random(DType::kFloat32, {m, 37}, &rng);
      const Tensor xt = Random(DType::kFloat32, {37, m}, &rng);
      ExpectDotMatches(x, Random(wt, {37, 51}, &rng), {1}, {0}, {}, {});
      ExpectDotMatches(x, Random(wt, {51, 37}, &rng), {1}, {1}, {}, {});
      ExpectDotMatches(xt, Random(wt, {37, 51}, &rng), {0}, {0}, {}, {});
      ExpectDotMatches(xt, Random(wt, {51, 37}, &rng), {0}, {1}, {}, {});
    }
  }
}

TEST(DotGeneralTest, EveryIsaCapGivesTheSameResults) {
  // SetSmallMIsaCap (MESHSERVE_GEMM_ISA in the binaries) forces each small-M
  // and widening kernel copy this CPU can run through DotGeneral.
  std::mt19937 rng(11);
  for (const char* cap : {"portable", "avx2", "avx512"}) {
    SetSmallMIsaCap(cap);
    const SmallMIsa isa = DefaultSmallMIsa();
    EXPECT_EQ(isa, CappedSmallMIsa(cap));
    if (std::string(SmallMIsaName(isa)) != cap) continue;  // not on this CPU
    for (int64_t m : {2, 8, 16, 64, 129}) {
      for (DType wt : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << cap << " M=" << m << " " << DTypeName(wt));
        const Tensor x = Random(DType::kFloat32, {m, 37}, &rng);
        ExpectDotMatches(x, Random(wt, {37, 51}, &rng), {1}, {0}, {}, {});
        ExpectDotMatches(x, Random(wt, {51, 37}, &rng), {1}, {1}, {}, {});
      }
    }
  }
  SetSmallMIsaCap("");
  EXPECT_EQ(DefaultSmallMIsa(), CappedSmallMIsa(""));
}

TEST(DotGeneralTest, BatchedSmallMAndPermutedWeights) {
  std::mt19937 rng(9);
  for (DType wt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (int64_t m : {1, 5, 40}) {
      SCOPED_TRACE(::testing::Message() << "M=" << m << " " << DTypeName(wt));
      // 'bmk,bkn->bmn' and 'bmk,bnk->bmn' (weights in place), 'bmk,kbn->bmn' (permuted).
      const Tensor x = Random(DType::kFloat32, {3, m, 19}, &rng);
      ExpectDotMatches(x, Random(wt, {3, 19, 23}, &rng), {2}, {1}, {0}, {0});
      ExpectDotMatches(x, Random(wt, {3, 23, 19}, &rng), {2}, {2}, {0}, {0});
      ExpectDotMatches(x, Random(wt, {19, 3, 23}, &rng), {2}, {0}, {0}, {1});
      // Transposed lhs 'bkm,bkn->bmn'.
      ExpectDotMatches(Random(DType::kFloat32, {3, 19, m}, &rng), Random(wt, {3, 19, 23}, &rng),
                       {1}, {1}, {0}, {0});
    }
  }
}

TEST(DotGeneralTest, WideningBlocksSplitKAndN) {
  // M = 20 (f16) and 130 (bf16: above kSmallMMaxBFloat16) take the widening
  // path; K = 1100 is three row blocks (512, 512, 76: beta = 1 after the
  // first), N = 600 two column blocks.
  std::mt19937 rng(10);
  for (DType wt : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(std::string(DTypeName(wt)));
    const int64_t m = wt == DType::kBFloat16 ? 130 : 20;
    const Tensor x = Random(DType::kFloat32, {m, 1100}, &rng);
    ExpectDotMatches(x, Random(wt, {1100, 600}, &rng), {1}, {0}, {}, {});
    ExpectDotMatches(x, Random(wt, {600, 1100}, &rng), {1}, {1}, {}, {});
    ExpectDotMatches(Random(DType::kFloat32, {1100, m}, &rng), Random(wt, {1100, 600}, &rng),
                     {0}, {0}, {}, {});
  }
}

TEST(DotGeneralTest, EmptyContractionGivesZeros) {
  ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Create(DType::kFloat32, {2, 0}));
  ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::Create(DType::kFloat32, {0, 3}));
  ASSERT_OK_AND_ASSIGN(Tensor c, DotGeneral(a, b, {1}, {0}, {}, {}, DType::kFloat32));
  EXPECT_THAT(c.shape(), ElementsAre(2, 3));
  EXPECT_THAT(c.ToFloatVector(), ::testing::Each(0.0f));
}

TEST(DotGeneralTest, Errors) {
  const Tensor a = Tensor::Zeros(DType::kFloat32, {2, 3});
  const Tensor b = Tensor::Zeros(DType::kFloat32, {4, 5});
  EXPECT_THAT(DotGeneral(a, b, {1}, {0}, {}, {}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "f32[2, 3]"));
  EXPECT_THAT(DotGeneral(a, b, {2}, {0}, {}, {}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "out of range"));
  EXPECT_THAT(DotGeneral(a, a, {1, 1}, {1, 0}, {}, {}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "more than once"));
  EXPECT_THAT(DotGeneral(a, a, {1}, {1, 0}, {}, {}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "as many"));
  EXPECT_THAT(DotGeneral(a, b, {}, {}, {0}, {0}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "batch dim sizes differ"));
  const Tensor ids = Tensor::Zeros(DType::kInt32, {3, 2});
  EXPECT_THAT(DotGeneral(a, ids, {1}, {0}, {}, {}, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "int32"));
  EXPECT_THAT(DotGeneral(a, a, {1}, {1}, {}, {}, DType::kInt32),
              StatusIs(absl::StatusCode::kInvalidArgument, "out_dtype"));
}

TEST(LinearTest, MatchesDotPlusBias) {
  std::mt19937 rng(7);
  const Tensor x = Random(DType::kFloat32, {2, 3, 4}, &rng);
  const Tensor w = Random(DType::kFloat32, {4, 5}, &rng);
  const Tensor bias = Random(DType::kFloat32, {5}, &rng);
  ASSERT_OK_AND_ASSIGN(Tensor y, Linear(x, w, &bias, DType::kFloat32));
  std::vector<int64_t> shape;
  const std::vector<double> ref = NaiveDotGeneral(x, w, {2}, {0}, {}, {}, &shape);
  ASSERT_EQ(y.shape(), shape);
  for (int64_t i = 0; i < y.NumElements(); ++i) {
    EXPECT_NEAR(y.GetFloat(i), ref[i] + bias.GetFloat(i % 5), 1e-5);
  }
  const Tensor bad_bias = Tensor::Zeros(DType::kFloat32, {4});
  EXPECT_THAT(Linear(x, w, &bad_bias, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "bias f32[4]"));
}

// --- elementwise ---

TEST(ElementwiseTest, AddBroadcasts) {
  const Tensor a = *Tensor::FromValues(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor row = *Tensor::FromValues(DType::kFloat32, {3}, {10, 20, 30});
  const Tensor col = *Tensor::FromValues(DType::kBFloat16, {2, 1}, {100, 200});
  EXPECT_THAT(Add(a, row, DType::kFloat32)->ToFloatVector(),
              ElementsAre(11, 22, 33, 14, 25, 36));
  EXPECT_THAT(Add(a, col, DType::kFloat32)->ToFloatVector(),
              ElementsAre(101, 102, 103, 204, 205, 206));
  EXPECT_THAT(Mul(col, row, DType::kFloat32)->ToFloatVector(),
              ElementsAre(1000, 2000, 3000, 2000, 4000, 6000));
  const Tensor s = *Tensor::FromValues(DType::kFloat32, {}, {2});
  ASSERT_OK_AND_ASSIGN(Tensor m, Mul(s, a, DType::kBFloat16));
  EXPECT_EQ(m.dtype(), DType::kBFloat16);
  EXPECT_THAT(m.ToFloatVector(), ElementsAre(2, 4, 6, 8, 10, 12));
}

TEST(ElementwiseTest, BroadcastRandomAgainstNaive) {
  std::mt19937 rng(8);
  const Tensor a = Random(DType::kFloat32, {3, 1, 4, 2}, &rng);
  const Tensor b = Random(DType::kFloat32, {5, 1, 2}, &rng);
  ASSERT_OK_AND_ASSIGN(Tensor c, Add(a, b, DType::kFloat32));
  ASSERT_THAT(c.shape(), ElementsAre(3, 5, 4, 2));
  for (int64_t i = 0; i < c.NumElements(); ++i) {
    const std::vector<int64_t> idx = Unflatten(i, c.shape());
    const float va = a.GetFloat(Flatten({idx[0], 0, idx[2], idx[3]}, a.shape()));
    const float vb = b.GetFloat(Flatten({idx[1], 0, idx[3]}, b.shape()));
    ASSERT_EQ(c.GetFloat(i), va + vb) << i;
  }
}

// Every inner-loop case of MapBinary: both rows contiguous, a row with a
// broadcast scalar on either side, both broadcast, and rank mismatches.
TEST(ElementwiseTest, EveryBroadcastRunKindAgainstNaive) {
  std::mt19937 rng(9);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 37}, {37}}, {{4, 37}, {4, 1}}, {{4, 1}, {4, 37}}, {{4, 1}, {1, 1}},
      {{2, 3, 19}, {3, 19}}, {{}, {2, 5}}, {{2, 5}, {}}, {{6, 2049}, {6, 2049}}};
  for (const auto& [sa, sb] : cases) {
    const Tensor a = Random(DType::kFloat32, sa, &rng);
    const Tensor b = Random(DType::kFloat32, sb, &rng);
    ASSERT_OK_AND_ASSIGN(Tensor sum, Add(a, b, DType::kFloat32));
    ASSERT_OK_AND_ASSIGN(Tensor prod, Mul(a, b, DType::kFloat32));
    const int rank = sum.rank();
    for (int64_t i = 0; i < sum.NumElements(); ++i) {
      const std::vector<int64_t> idx = Unflatten(i, sum.shape());
      auto value = [&](const Tensor& t) {
        std::vector<int64_t> ti(t.rank());
        for (int d = 0; d < t.rank(); ++d) {
          ti[d] = t.dim(d) == 1 ? 0 : idx[d + rank - t.rank()];
        }
        return t.GetFloat(Flatten(ti, t.shape()));
      };
      ASSERT_EQ(sum.GetFloat(i), value(a) + value(b)) << ShapeToString(sa) << ShapeToString(sb);
      ASSERT_EQ(prod.GetFloat(i), value(a) * value(b)) << ShapeToString(sa) << ShapeToString(sb);
    }
  }
}

TEST(ElementwiseTest, BroadcastErrorNamesShapes) {
  const Tensor a = Tensor::Zeros(DType::kFloat32, {2, 3});
  const Tensor b = Tensor::Zeros(DType::kFloat32, {4});
  EXPECT_THAT(Add(a, b, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "[2, 3] and [4] do not broadcast"));
}

TEST(ElementwiseTest, Activations) {
  const std::vector<float> xs = {-3.0f, -1.0f, -0.1f, 0.0f, 0.5f, 2.0f};
  const Tensor x = *Tensor::FromValues(DType::kFloat32, {6}, xs);
  const std::vector<float> relu = Relu(x, DType::kFloat32)->ToFloatVector();
  const std::vector<float> gelu = Gelu(x, DType::kFloat32)->ToFloatVector();
  const std::vector<float> gelu_exact = Gelu(x, DType::kFloat32, false)->ToFloatVector();
  const std::vector<float> silu = Silu(x, DType::kFloat32)->ToFloatVector();
  const std::vector<float> tanh = Tanh(x, DType::kFloat32)->ToFloatVector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_EQ(relu[i], std::max(v, 0.0));
    EXPECT_NEAR(gelu[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-6);
    EXPECT_NEAR(gelu_exact[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
    EXPECT_NEAR(silu[i], v / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(tanh[i], std::tanh(v), 1e-6);
  }
  // jax.nn.gelu(1.0) == 0.841192
  EXPECT_NEAR(Gelu(*Tensor::FromValues(DType::kFloat32, {1}, {1.0f}), DType::kFloat32)
                  ->GetFloat(0), 0.841192, 1e-5);
  EXPECT_THAT(Relu(Tensor::Zeros(DType::kInt32, {2}), DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "int32"));
}

// Gelu and Silu through every input/output dtype path (float32 in place of
// the chunked widen/narrow path; > 2048 elements so several chunks run)
// against the float64 formulas.
TEST(ElementwiseTest, GeluAndSiluOverDtypesAndChunks) {
  std::vector<float> xs;
  for (int i = 0; i < 5000; ++i) xs.push_back(-12.0f + 24.0f * i / 4999);
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    for (DType out : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
      const Tensor x = *Tensor::FromValues(in, {5, 1000}, xs);
      ASSERT_OK_AND_ASSIGN(Tensor g, Gelu(x, out));
      ASSERT_OK_AND_ASSIGN(Tensor s, Silu(x, out));
      ASSERT_EQ(g.dtype(), out);
      ASSERT_THAT(g.shape(), ElementsAre(5, 1000));
      const double tol = out == DType::kBFloat16 ? 1.0 / 128 : 2e-6;
      for (int64_t i = 0; i < x.NumElements(); ++i) {
        const double v = x.GetFloat(i);
        const double u = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
        const double gr = v / (1 + std::exp(-2 * u)), sr = v / (1 + std::exp(-v));
        ASSERT_NEAR(g.GetFloat(i), gr, tol * std::fabs(gr) + 1e-30) << v;
        ASSERT_NEAR(s.GetFloat(i), sr, tol * std::fabs(sr) + 1e-30) << v;
      }
    }
  }
}

TEST(ElementwiseTest, AccumulateAndSum) {
  Tensor acc = *Tensor::FromValues(DType::kBFloat16, {3}, {1, 2, 3});
  const Tensor x = *Tensor::FromValues(DType::kBFloat16, {3}, {0.5f, 0.5f, 0.5f});
  EXPECT_OK(AccumulateInto(&acc, x));
  EXPECT_THAT(acc.ToFloatVector(), ElementsAre(1.5f, 2.5f, 3.5f));
  EXPECT_THAT(AccumulateInto(&acc, Tensor::Zeros(DType::kBFloat16, {2})),
              StatusIs(absl::StatusCode::kInvalidArgument, "bf16[2]"));
  const Tensor a = *Tensor::FromValues(DType::kFloat32, {2}, {1, 2});
  const Tensor b = *Tensor::FromValues(DType::kBFloat16, {2}, {10, 20});
  const Tensor* terms[] = {&a, &b, &a};
  EXPECT_THAT(Sum(terms, DType::kFloat32)->ToFloatVector(), ElementsAre(12, 24));
  EXPECT_THAT(Sum({}, DType::kFloat32), StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- normalisation ---

TEST(NormTest, RmsNormMatchesFormula) {
  std::mt19937 rng(9);
  const Tensor x = Random(DType::kFloat32, {3, 8}, &rng);
  const Tensor scale = Random(DType::kFloat32, {8}, &rng);
  ASSERT_OK_AND_ASSIGN(Tensor y, RmsNorm(x, scale, 1e-6, DType::kFloat32));
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int j = 0; j < 8; ++j) ms += std::pow(x.GetFloat(r * 8 + j), 2);
    const double inv = 1 / std::sqrt(ms / 8 + 1e-6);
    for (int j = 0; j < 8; ++j) {
      EXPECT_NEAR(y.GetFloat(r * 8 + j), x.GetFloat(r * 8 + j) * inv * scale.GetFloat(j), 1e-5);
    }
  }
  EXPECT_THAT(RmsNorm(x, Tensor::Zeros(DType::kFloat32, {3}), 1e-6, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "scale f32[3]"));
  EXPECT_THAT(RmsNorm(x, scale, -1, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "epsilon"));
}

TEST(NormTest, LayerNormMatchesFormula) {
  std::mt19937 rng(10);
  const Tensor x = Random(DType::kBFloat16, {2, 2, 6}, &rng);
  const Tensor scale = Random(DType::kFloat32, {6}, &rng);
  const Tensor bias = Random(DType::kFloat32, {6}, &rng);
  ASSERT_OK_AND_ASSIGN(Tensor y, LayerNorm(x, scale, bias, 1e-5, DType::kFloat32));
  for (int r = 0; r < 4; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 6; ++j) mean += x.GetFloat(r * 6 + j) / 6.0;
    for (int j = 0; j < 6; ++j) var += std::pow(x.GetFloat(r * 6 + j) - mean, 2) / 6.0;
    for (int j = 0; j < 6; ++j) {
      const double want = (x.GetFloat(r * 6 + j) - mean) / std::sqrt(var + 1e-5) *
                              scale.GetFloat(j) + bias.GetFloat(j);
      EXPECT_NEAR(y.GetFloat(r * 6 + j), want, 1e-4);
    }
  }
}

TEST(NormTest, SoftmaxAlongEachAxis) {
  std::mt19937 rng(11);
  const Tensor x = Random(DType::kFloat32, {2, 3, 4}, &rng);
  for (int64_t axis : {0, 1, 2, -1, -3}) {
    ASSERT_OK_AND_ASSIGN(Tensor y, Softmax(x, axis, DType::kFloat32));
    const int a = static_cast<int>(axis < 0 ? axis + 3 : axis);
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      std::vector<int64_t> idx = Unflatten(i, x.shape());
      double denom = 0;
      for (int64_t k = 0; k < x.dim(a); ++k) {
        std::vector<int64_t> j = idx;
        j[a] = k;
        denom += std::exp(x.GetFloat(Flatten(j, x.shape())));
      }
      EXPECT_NEAR(y.GetFloat(i), std::exp(x.GetFloat(i)) / denom, 1e-6);
    }
  }
  // Large values do not overflow (max-subtracted).
  const Tensor big = *Tensor::FromValues(DType::kFloat32, {2}, {1000.0f, 1000.0f});
  EXPECT_THAT(Softmax(big, 0, DType::kFloat32)->ToFloatVector(), ElementsAre(0.5f, 0.5f));
  EXPECT_THAT(Softmax(x, 3, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "axis 3"));
}

// --- layout ---

TEST(LayoutTest, TransposeAgainstNaive) {
  std::mt19937 rng(12);
  const Tensor x = Random(DType::kBFloat16, {2, 3, 4, 5}, &rng);
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  ASSERT_OK_AND_ASSIGN(Tensor y, Transpose(x, perm));
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  ASSERT_THAT(y.shape(), ElementsAre(4, 2, 5, 3));
  for (int64_t i = 0; i < y.NumElements(); ++i) {
    const std::vector<int64_t> oi = Unflatten(i, y.shape());
    std::vector<int64_t> xi(4);
    for (int d = 0; d < 4; ++d) xi[perm[d]] = oi[d];
    ASSERT_EQ(y.data<uint16_t>()[i], x.data<uint16_t>()[Flatten(xi, x.shape())]);
  }
  EXPECT_THAT(Transpose(x, {0, 1, 1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a permutation"));
}

TEST(LayoutTest, Reshape) {
  const Tensor x = *Tensor::FromValues(DType::kFloat32, {2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  ASSERT_OK_AND_ASSIGN(Tensor y, Reshape(x, {3, -1}));
  EXPECT_THAT(y.shape(), ElementsAre(3, 4));
  EXPECT_EQ(y.bytes(), x.bytes());
  EXPECT_THAT(Reshape(x, {5, -1}), StatusIs(absl::StatusCode::kInvalidArgument, "[5, -1]"));
  EXPECT_THAT(Reshape(x, {-1, -1}), StatusIs(absl::StatusCode::kInvalidArgument, "more than one"));
  EXPECT_THAT(Reshape(x, {13}), StatusIs(absl::StatusCode::kInvalidArgument, "[13]"));
  Tensor moved = x;
  ASSERT_OK_AND_ASSIGN(Tensor z, Reshape(std::move(moved), {12}));
  EXPECT_THAT(z.shape(), ElementsAre(12));
}

TEST(LayoutTest, EmbedVocabShardsSumToFullLookup) {
  std::mt19937 rng(13);
  const Tensor table = Random(DType::kFloat32, {10, 4}, &rng);
  const Tensor ids = *Tensor::FromInt32({2, 3}, {0, 9, 4, 5, 4, 11});
  ASSERT_OK_AND_ASSIGN(BoxTensor full, BoxTensor::Wrap(Box::FromShape({10, 4}), table));
  ASSERT_OK_AND_ASSIGN(Tensor want, Embed(ids, full, DType::kFloat32));
  ASSERT_THAT(want.shape(), ElementsAre(2, 3, 4));
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(want.GetFloat(1 * 4 + j), table.GetFloat(9 * 4 + j));
    EXPECT_EQ(want.GetFloat(5 * 4 + j), 0.0f);  // id 11 outside the vocab
  }
  // Two vocab shards [0:5) and [5:10): partial lookups add up.
  Tensor acc = Tensor::Zeros(DType::kFloat32, {2, 3, 4});
  for (int s = 0; s < 2; ++s) {
    const Box box({Interval{5 * s, 5 * s + 5}, Interval{0, 4}});
    BoxTensor shard = *BoxTensor::Create(DType::kFloat32, box);
    shard.tensor = *Tensor::FromBytes(DType::kFloat32, {5, 4}, table.bytes().substr(s * 80, 80));
    ASSERT_OK_AND_ASSIGN(Tensor part, Embed(ids, shard, DType::kFloat32));
    ASSERT_OK(AccumulateInto(&acc, part));
  }
  EXPECT_EQ(acc, want);
  EXPECT_THAT(Embed(Tensor::Zeros(DType::kFloat32, {2}), full, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "int32 or int64"));
}

}  // namespace
}  // namespace meshserve
