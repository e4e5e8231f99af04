#include "common/tensor/gemm_small_m.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/tensor/bfloat16.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

struct Problem {
  int64_t m, k, n;
  bool transposed;
  DType dtype;
  std::vector<float> a;
  std::vector<float> w;       // float32 weights ...
  std::vector<uint16_t> wb;   // ... or their bfloat16 form (w holds the widened values)
  SmallMWeights Weights() const {
    SmallMWeights sw;
    sw.dtype = dtype;
    sw.transposed = transposed;
    sw.data = dtype == DType::kBFloat16 ? static_cast<const void*>(wb.data())
                                        : static_cast<const void*>(w.data());
    return sw;
  }
};

Problem MakeProblem(int64_t m, int64_t k, int64_t n, bool transposed, DType dtype,
                    std::mt19937* rng) {
  Problem p{m, k, n, transposed, dtype, {}, {}, {}};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  p.a.resize(static_cast<size_t>(m * k));
  for (float& x : p.a) x = dist(*rng);
  p.w.resize(static_cast<size_t>(k * n));
  for (float& x : p.w) x = dist(*rng);
  if (dtype == DType::kBFloat16) {
    p.wb.resize(p.w.size());
    for (size_t i = 0; i < p.w.size(); ++i) {
      p.wb[i] = FloatToBFloat16(p.w[i]);
      p.w[i] = BFloat16ToFloat(p.wb[i]);
    }
  }
  return p;
}

// Checks GemmSmallM against a double-precision loop over the exact weight
// values: float32 accumulation error only (no rounding of activations).
void ExpectMatchesNaive(const Problem& p, int threads, SmallMIsa isa) {
  std::vector<float> c(static_cast<size_t>(p.m * p.n), NAN);
  GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, c.data(), threads, isa);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double want = 0, scale = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const double w = p.transposed ? p.w[j * p.k + q] : p.w[q * p.n + j];
        want += static_cast<double>(p.a[i * p.k + q]) * w;
        scale += std::fabs(p.a[i * p.k + q] * w);
      }
      ASSERT_NEAR(c[i * p.n + j], want, 1e-6 * (1 + scale))
          << "m=" << i << " n=" << j << " of M=" << p.m << " K=" << p.k << " N=" << p.n;
    }
  }
}

std::vector<SmallMIsa> SupportedIsas() {
  std::vector<SmallMIsa> out;
  for (SmallMIsa isa : {SmallMIsa::kPortable, SmallMIsa::kAvx2, SmallMIsa::kAvx512}) {
    if (SmallMIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

TEST(GemmSmallMTest, PortableIsAlwaysSupportedAndDefaultIsSupported) {
  EXPECT_TRUE(SmallMIsaSupported(SmallMIsa::kPortable));
  EXPECT_TRUE(SmallMIsaSupported(DefaultSmallMIsa()));
  EXPECT_EQ(std::string(SmallMIsaName(SmallMIsa::kAvx2)), "avx2");
}

TEST(GemmSmallMTest, CapForcesTheFallback) {
  EXPECT_EQ(CappedSmallMIsa("portable"), SmallMIsa::kPortable);
  EXPECT_EQ(CappedSmallMIsa("PORTABLE"), SmallMIsa::kPortable);
  const SmallMIsa avx2 = CappedSmallMIsa("avx2");
  EXPECT_TRUE(avx2 == SmallMIsa::kAvx2 || (avx2 == SmallMIsa::kPortable &&
                                           !SmallMIsaSupported(SmallMIsa::kAvx2)));
  EXPECT_EQ(CappedSmallMIsa(""), CappedSmallMIsa("avx512"));
  EXPECT_TRUE(SmallMIsaSupported(CappedSmallMIsa("")));
}

TEST(GemmSmallMTest, SetSmallMIsaCapCapsTheDefault) {
  const SmallMIsa best = CappedSmallMIsa("");
  SetSmallMIsaCap("portable");
  EXPECT_EQ(DefaultSmallMIsa(), SmallMIsa::kPortable);
  SetSmallMIsaCap("AVX2");
  EXPECT_EQ(DefaultSmallMIsa(), CappedSmallMIsa("avx2"));
  SetSmallMIsaCap("no such isa");  // no cap
  EXPECT_EQ(DefaultSmallMIsa(), best);
  SetSmallMIsaCap("");
  EXPECT_EQ(DefaultSmallMIsa(), best);
}

TEST(GemmSmallMTest, WidenBFloat16IsExactOnEveryIsa) {
  std::vector<uint16_t> src(37);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(0x3F80 + 977 * i);
  for (SmallMIsa isa : SupportedIsas()) {
    std::vector<float> dst(src.size());
    WidenBFloat16(src.data(), static_cast<int64_t>(src.size()), dst.data(), isa);
    for (size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(dst[i], BFloat16ToFloat(src[i])) << SmallMIsaName(isa) << " " << i;
    }
  }
}

TEST(GemmSmallMTest, EveryIsaLayoutAndDtypeMatchesNaiveOnOddSizes) {
  std::mt19937 rng(11);
  for (SmallMIsa isa : SupportedIsas()) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (bool transposed : {false, true}) {
        for (int64_t m : {1, 2, 3, 7, 8, 15, 16, 17, 33, 64, 129}) {
          SCOPED_TRACE(::testing::Message() << SmallMIsaName(isa) << " " << DTypeName(dtype)
                                            << (transposed ? " [N,K]" : " [K,N]") << " M=" << m);
          // K spans the K-chunk boundaries (8, 64) and vector tails; N has a tile tail.
          ExpectMatchesNaive(MakeProblem(m, 131, 67, transposed, dtype, &rng), 1, isa);
          ExpectMatchesNaive(MakeProblem(m, 5, 3, transposed, dtype, &rng), 1, isa);
        }
      }
    }
  }
}

// Weights read in place at a row stride (a block of columns of a wider
// matrix, as DotGeneralInPlace's param slices): the rows sit `pad` elements
// apart beyond their length, the gaps hold NaN (read by mistake, they would
// poison the result), and the result matches the dense reference.
void ExpectStridedMatchesNaive(const Problem& p, int64_t pad, int threads, SmallMIsa isa) {
  const int64_t rows = p.transposed ? p.n : p.k, cols = p.transposed ? p.k : p.n;
  const int64_t stride = cols + pad;
  std::vector<float> wf(static_cast<size_t>(rows * stride), NAN);
  std::vector<uint16_t> wb(wf.size(), FloatToBFloat16(NAN));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t q = 0; q < cols; ++q) {
      wf[r * stride + q] = p.w[r * cols + q];
      if (p.dtype == DType::kBFloat16) wb[r * stride + q] = p.wb[r * cols + q];
    }
  }
  SmallMWeights w = p.Weights();
  w.data = p.dtype == DType::kBFloat16 ? static_cast<const void*>(wb.data())
                                       : static_cast<const void*>(wf.data());
  w.row_stride = stride;
  std::vector<float> got(static_cast<size_t>(p.m * p.n), NAN);
  GemmSmallM(p.a.data(), p.m, p.k, w, p.n, got.data(), threads, isa);
  std::vector<float> want(got.size(), NAN);
  GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, want.data(), threads, isa);
  ExpectMatchesNaive(p, threads, isa);  // the dense result against float64
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "element " << i << " stride " << stride;  // same order of sums
  }
}

TEST(GemmSmallMTest, RowStrideReadsColumnBlocksInPlaceOnEveryIsa) {
  std::mt19937 rng(17);
  for (SmallMIsa isa : SupportedIsas()) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (bool transposed : {false, true}) {
        for (int64_t m : {1, 2, 5, 8, 16, 17}) {
          SCOPED_TRACE(::testing::Message() << SmallMIsaName(isa) << " " << DTypeName(dtype)
                                            << (transposed ? " [N,K]" : " [K,N]") << " M=" << m);
          ExpectStridedMatchesNaive(MakeProblem(m, 131, 67, transposed, dtype, &rng), 13, 1, isa);
          ExpectStridedMatchesNaive(MakeProblem(m, 40, 200, transposed, dtype, &rng), 40, 2, isa);
        }
      }
    }
  }
}

TEST(GemmSmallMTest, NarrowTilesAndScalarColumnsAtEveryEdge) {
  // N around tile (2-3 vectors) and vector widths, so blocks end in a
  // narrower tile (1 or 2 vectors) and/or a scalar tail; N = 2048 + 40 and
  // 3072 + 40 put that tile after whole blocks (1024 columns for AVX2 and
  // portable, 3072 for AVX-512). M across the row-group (6 / 8) and K-chunk
  // (8 rows for M <= 8, 64 above) edges.
  std::mt19937 rng(15);
  for (SmallMIsa isa : SupportedIsas()) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (int64_t n : {8, 16, 24, 31, 32, 40, 47, 48, 63, 95, 2088, 3112}) {
        for (int64_t m : {1, 6, 8, 9, 65}) {
          SCOPED_TRACE(::testing::Message() << SmallMIsaName(isa) << " " << DTypeName(dtype)
                                            << " M=" << m << " N=" << n);
          ExpectMatchesNaive(MakeProblem(m, n > 100 ? 9 : 131, n, false, dtype, &rng), 1, isa);
        }
      }
    }
  }
}

TEST(GemmSmallMTest, ManyColumnBlocks) {
  // N spans several column blocks (4096 columns for AVX2) and a ragged tail.
  std::mt19937 rng(14);
  for (SmallMIsa isa : SupportedIsas()) {
    for (int64_t m : {1, 9}) {
      SCOPED_TRACE(::testing::Message() << SmallMIsaName(isa) << " M=" << m);
      ExpectMatchesNaive(MakeProblem(m, 17, 10000, false, DType::kBFloat16, &rng), 1, isa);
      ExpectMatchesNaive(MakeProblem(m, 17, 10000, false, DType::kFloat32, &rng), 1, isa);
    }
  }
}

TEST(GemmSmallMTest, ThreadsSplitColumnsWithoutChangingResults) {
  // m * n * k >= 2^21 so two threads take part; N is not a multiple of any tile.
  // M = 1 takes the single-row path (rows 8 at a time, then a 5-row tail).
  std::mt19937 rng(12);
  for (SmallMIsa isa : SupportedIsas()) {
    for (bool transposed : {false, true}) {
      for (const int64_t m : {1, 9}) {
        SCOPED_TRACE(::testing::Message()
                     << SmallMIsaName(isa) << (transposed ? " [N,K]" : "") << " M=" << m);
        const Problem p =
            MakeProblem(m, m == 1 ? 2101 : 257, 1001, transposed, DType::kBFloat16, &rng);
        ExpectMatchesNaive(p, 3, isa);
        std::vector<float> one(static_cast<size_t>(p.m * p.n)), three(one.size());
        GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, one.data(), 1, isa);
        GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, three.data(), 3, isa);
        EXPECT_EQ(one, three);
      }
    }
  }
}

TEST(GemmSmallMTest, IsasAgreeClosely) {
  std::mt19937 rng(13);
  const Problem p = MakeProblem(16, 2048, 160, false, DType::kFloat32, &rng);
  std::vector<float> portable(static_cast<size_t>(p.m * p.n)), best(portable.size());
  GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, portable.data(), 1, SmallMIsa::kPortable);
  GemmSmallM(p.a.data(), p.m, p.k, p.Weights(), p.n, best.data(), 1, DefaultSmallMIsa());
  for (size_t i = 0; i < best.size(); ++i) ASSERT_NEAR(best[i], portable[i], 1e-3) << i;
}

}  // namespace
}  // namespace meshserve
