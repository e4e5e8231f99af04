// activations.h against float64 references, on every ISA this CPU runs.
#include "common/tensor/activations.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace meshserve {
namespace {

using Kernel = void (*)(const float*, int64_t, float*, SmallMIsa);

std::vector<SmallMIsa> SupportedIsas() {
  std::vector<SmallMIsa> out;
  for (SmallMIsa isa : {SmallMIsa::kPortable, SmallMIsa::kAvx2, SmallMIsa::kAvx512}) {
    if (SmallMIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

// A dense grid over [-lim, lim] plus +-10^e for e in [-38, 38] (4 per decade)
// and the edges of the float range: n not a multiple of any vector width, so
// the tail path runs too.
std::vector<float> Inputs(double lim, double step) {
  std::vector<float> x;
  for (double v = -lim; v <= lim; v += step) x.push_back(static_cast<float>(v));
  for (double e = -38; e <= 38; e += 0.25) {
    x.push_back(static_cast<float>(std::pow(10.0, e)));
    x.push_back(-static_cast<float>(std::pow(10.0, e)));
  }
  for (float v : {0.0f, -0.0f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f,
                  88.72f, 88.73f, -87.33f, -103.9f, -104.5f, -114.9f, -115.5f}) {
    x.push_back(v);
  }
  x.push_back(1.0f);  // odd length
  return x;
}

double GeluTanhRef(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));  // = 0.5 x (1 + tanh(u)), no cancellation
}
double SiluRef(double x) { return x / (1.0 + std::exp(-x)); }
double SigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// |y - ref| <= rel |ref| where ref (rounded to float) is a normal float or 0;
// within 1e-44 (8 subnormal ulps) where it is subnormal; inf
// where ref overflows / underflows float.
void ExpectClose(Kernel kernel, double (*ref)(double), double rel, double lim, double step,
                 const std::string& name) {
  const std::vector<float> x = Inputs(lim, step);
  for (SmallMIsa isa : SupportedIsas()) {
    std::vector<float> y(x.size());
    kernel(x.data(), static_cast<int64_t>(x.size()), y.data(), isa);
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 10; ++i) {
      const double r = ref(x[i]);
      const double rf = static_cast<float>(r);
      bool ok;
      if (std::isinf(rf)) {
        ok = y[i] == rf;
      } else if (std::fabs(rf) < FLT_MIN) {  // subnormal: a few of its ulps
        ok = std::fabs(y[i] - r) <= 4 * std::numeric_limits<float>::denorm_min();
      } else {
        ok = std::fabs(y[i] - r) <= rel * std::fabs(r);
      }
      if (!ok) {
        ++bad;
        ADD_FAILURE() << name << " isa=" << SmallMIsaName(isa) << " x=" << x[i]
                      << " got " << y[i] << " want " << r << " rel err "
                      << std::fabs(y[i] - r) / std::fabs(r);
      }
    }
  }
}

TEST(ActivationsTest, ExpWithinTwoUlpOverTheWholeRange) {
  ExpectClose(ExpF32, [](double x) { return std::exp(x); }, 2.5e-7, 110.0, 1.3e-3, "exp");
}

TEST(ActivationsTest, GeluTanhMatchesFloat64Formula) {
  ExpectClose(GeluTanhF32, GeluTanhRef, 1e-6, 20.0, 1.1e-4, "gelu");
}

TEST(ActivationsTest, SiluMatchesFloat64Formula) {
  ExpectClose(SiluF32, SiluRef, 1e-6, 110.0, 1.3e-3, "silu");
}

TEST(ActivationsTest, SigmoidMatchesFloat64Formula) {
  ExpectClose(SigmoidF32, SigmoidRef, 1e-6, 110.0, 1.3e-3, "sigmoid");
}

// The float32 libm forms the kernels replace agree where they are accurate
// themselves (the tanh form cancels for x << 0, so only x > -3 here).
TEST(ActivationsTest, AgreesWithScalarLibmForms) {
  std::vector<float> x;
  for (float v = -3.0f; v < 12.0f; v += 1e-3f) x.push_back(v);
  for (SmallMIsa isa : SupportedIsas()) {
    std::vector<float> gelu(x.size()), silu(x.size());
    GeluTanhF32(x.data(), static_cast<int64_t>(x.size()), gelu.data(), isa);
    SiluF32(x.data(), static_cast<int64_t>(x.size()), silu.data(), isa);
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      const float g = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
      const float s = v / (1.0f + std::exp(-v));
      SCOPED_TRACE(SmallMIsaName(isa));
      ASSERT_NEAR(gelu[i], g, 2e-6f * std::fabs(g) + 3e-7f) << "x=" << v;
      ASSERT_NEAR(silu[i], s, 1e-6f * std::fabs(s) + 1e-37f) << "x=" << v;
    }
  }
}

TEST(ActivationsTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f};
  for (SmallMIsa isa : SupportedIsas()) {
    SCOPED_TRACE(SmallMIsaName(isa));
    std::vector<float> e(5), g(5), s(5), sg(5);
    ExpF32(x.data(), 5, e.data(), isa);
    GeluTanhF32(x.data(), 5, g.data(), isa);
    SiluF32(x.data(), 5, s.data(), isa);
    SigmoidF32(x.data(), 5, sg.data(), isa);
    EXPECT_TRUE(std::isnan(e[0]) && std::isnan(g[0]) && std::isnan(s[0]) && std::isnan(sg[0]));
    EXPECT_EQ(e[1], inf);
    EXPECT_EQ(e[2], 0.0f);
    EXPECT_EQ(e[3], 1.0f);
    EXPECT_EQ(g[1], inf);
    EXPECT_TRUE(std::isnan(g[2]));  // -inf * 0, as the formula in float64
    EXPECT_EQ(s[1], inf);
    EXPECT_TRUE(std::isnan(s[2]));
    EXPECT_EQ(sg[1], 1.0f);
    EXPECT_EQ(sg[2], 0.0f);
    EXPECT_EQ(g[3], 0.0f);
    EXPECT_TRUE(std::signbit(g[4]) && g[4] == 0.0f);
    EXPECT_EQ(sg[3], 0.5f);
    // Far past exp's clamp the product is 0, not x times exp(-115).
    const std::vector<float> big = {-1e30f, -FLT_MAX, -200.0f};
    std::vector<float> gb(3), sb(3);
    GeluTanhF32(big.data(), 3, gb.data(), isa);
    SiluF32(big.data(), 3, sb.data(), isa);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(gb[i] == 0.0f && std::signbit(gb[i])) << big[i] << " -> " << gb[i];
      EXPECT_TRUE(sb[i] == 0.0f && std::signbit(sb[i])) << big[i] << " -> " << sb[i];
    }
  }
}

TEST(ActivationsTest, InPlaceEqualsOutOfPlace) {
  std::vector<float> x;
  for (int i = 0; i < 37; ++i) x.push_back(0.37f * i - 6.0f);
  for (SmallMIsa isa : SupportedIsas()) {
    std::vector<float> out(x.size()), in_place = x;
    GeluTanhF32(x.data(), 37, out.data(), isa);
    GeluTanhF32(in_place.data(), 37, in_place.data(), isa);
    EXPECT_EQ(out, in_place) << SmallMIsaName(isa);
  }
}

TEST(ActivationsTest, SoftmaxRowMatchesFloat64) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (SmallMIsa isa : SupportedIsas()) {
    for (int64_t n : {1, 3, 8, 15, 16, 17, 33, 100, 1027}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng);
      if (n > 2) x[1] = -inf;  // a masked entry
      if (n > 16) x[n - 1] = 80.0f;  // a large max in the tail
      std::vector<float> y(n);
      SoftmaxRowF32(x.data(), n, y.data(), isa);
      double mx = -INFINITY, sum = 0;
      for (float v : x) mx = std::max<double>(mx, v);
      for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double r = std::exp(static_cast<double>(x[i]) - mx) / sum;
        ASSERT_NEAR(y[i], r, 2e-6 * r + 1e-30)
            << SmallMIsaName(isa) << " n=" << n << " i=" << i;
      }
    }
    const std::vector<float> masked = {-inf, -inf, -inf};
    std::vector<float> y(3);
    SoftmaxRowF32(masked.data(), 3, y.data(), isa);
    EXPECT_TRUE(std::isnan(y[0])) << "all -inf gives NaN as jax.nn.softmax";
  }
}

TEST(ActivationsTest, AvxCopiesGiveTheSameBits) {
  // One algorithm with the same FMAs: the AVX2 and AVX-512 copies agree
  // exactly (the portable one rounds a b + c twice; checked above for
  // accuracy instead).
  if (!SmallMIsaSupported(SmallMIsa::kAvx2)) GTEST_SKIP() << "no AVX2";
  const std::vector<float> x = Inputs(12.0, 3.7e-3);
  std::vector<float> want(x.size()), got(x.size());
  GeluTanhF32(x.data(), static_cast<int64_t>(x.size()), want.data(), SmallMIsa::kAvx2);
  for (SmallMIsa isa : SupportedIsas()) {
    if (isa == SmallMIsa::kPortable) continue;
    GeluTanhF32(x.data(), static_cast<int64_t>(x.size()), got.data(), isa);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
          << SmallMIsaName(isa) << " x=" << x[i] << " " << got[i] << " vs " << want[i];
    }
  }
}

}  // namespace
}  // namespace meshserve
