#include "common/tensor/initializers.h"

#include <chrono>
#include <ctime>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

InitSpec Spec(InitKind kind, double stddev = 1.0, double scale = 1.0) {
  InitSpec s;
  s.kind = kind;
  s.stddev = stddev;
  s.scale = scale;
  return s;
}

struct Moments {
  double mean = 0, stddev = 0, min = 1e300, max = -1e300;
};
Moments MomentsOf(const Tensor& t) {
  Moments m;
  const std::vector<float> v = t.ToFloatVector();
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean = s / v.size();
  m.stddev = std::sqrt(s2 / v.size() - m.mean * m.mean);
  return m;
}

TEST(InitGeneratorTest, KnownConstants) {
  // FNV-1a 64 test vectors.
  EXPECT_EQ(InitNameHash(""), 0xCBF29CE484222325ull);
  EXPECT_EQ(InitNameHash("a"), 0xAF63DC4C8601EC8Cull);
  EXPECT_EQ(InitNameHash("foobar"), 0x85944171F73967E8ull);
  // SplitMix64 from state 0: first output 0xE220A8397B1DCDAF.
  EXPECT_EQ(InitBits(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(InitBits(0, 1), 0x6E789E6AA1B965F4ull);
  EXPECT_NE(InitKey(0, "w"), InitKey(1, "w"));
  EXPECT_NE(InitKey(0, "w"), InitKey(0, "v"));
}

TEST(InitGeneratorTest, ErfInvInvertsErf) {
  for (double y = -3.0; y <= 3.0; y += 0.0137) {
    EXPECT_NEAR(ErfInv(std::erf(y)), y, 1.3e-7 * std::fabs(y)) << y;
  }
  EXPECT_EQ(ErfInv(0.0), 0.0);
  // Tails: x = +-(1 - 2^-k); the residual in erfc is relative to 1 - |x|.
  for (int k = 9; k <= 53; ++k) {  // w >= 5 from k = 9
    const double tail = std::ldexp(1.0, -k);
    for (double sign : {-1.0, 1.0}) {
      const double y = ErfInv(sign * (1.0 - tail));
      EXPECT_EQ(y < 0, sign < 0);
      EXPECT_NEAR(std::erfc(std::fabs(y)), tail, 1e-10 * tail) << k;
    }
  }
}

TEST(InitGeneratorTest, Fans) {
  EXPECT_EQ(InitFans(std::vector<int64_t>{4, 8}), std::make_pair(4.0, 8.0));
  EXPECT_EQ(InitFans(std::vector<int64_t>{3, 4, 8}), std::make_pair(12.0, 24.0));
  EXPECT_EQ(InitFans(std::vector<int64_t>{5}), std::make_pair(5.0, 5.0));
}

class InitializerKindTest : public ::testing::TestWithParam<InitKind> {};

TEST_P(InitializerKindTest, ElementDependsOnlyOnGlobalIndex) {
  const std::vector<int64_t> shape = {6, 10, 7};
  const InitSpec spec = Spec(GetParam(), 0.5, 0.25);
  ASSERT_OK_AND_ASSIGN(Tensor full, InitializeBox(spec, 42, "layer.kernel", shape,
                                                  Box::FromShape(shape), DType::kFloat32));
  for (const char* text : {"[1:4, 3:9, 2:7]", "[0:6, 0:10, 0:7]", "[5:6, 9:10, 6:7]",
                           "[2:3, 0:10, 0:7]", "[0:6, 4:4, 0:7]"}) {
    const Box box = *ParseBox(text);
    ASSERT_OK_AND_ASSIGN(Tensor part,
                         InitializeBox(spec, 42, "layer.kernel", shape, box, DType::kFloat32));
    ASSERT_EQ(part.shape(), box.shape());
    for (int64_t i = 0; i < part.NumElements(); ++i) {
      int64_t rem = i, flat = 0, stride = 1;
      for (int d = 2; d >= 0; --d) {
        flat += (box[d].begin + rem % box[d].size()) * stride;
        rem /= box[d].size();
        stride *= shape[d];
      }
      ASSERT_EQ(part.GetFloat(i), full.GetFloat(flat)) << text << " element " << i;
    }
  }
}

TEST_P(InitializerKindTest, Bfloat16IsTheRoundedFloat32) {
  const std::vector<int64_t> shape = {16, 16};
  const InitSpec spec = Spec(GetParam(), 2.0, 3.0);
  ASSERT_OK_AND_ASSIGN(Tensor f, InitializeBox(spec, 7, "w", shape, Box::FromShape(shape),
                                               DType::kFloat32));
  ASSERT_OK_AND_ASSIGN(Tensor b, InitializeBox(spec, 7, "w", shape, Box::FromShape(shape),
                                               DType::kBFloat16));
  EXPECT_EQ(*ConvertDType(f, DType::kBFloat16), b);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, InitializerKindTest,
                         ::testing::Values(InitKind::kZeros, InitKind::kOnes, InitKind::kNormal,
                                           InitKind::kLecunNormal, InitKind::kXavierUniform,
                                           InitKind::kUniform),
                         [](const auto& info) { return std::string(InitKindName(info.param)); });

TEST(InitializerTest, SeedAndNameChangeValues) {
  const std::vector<int64_t> shape = {4, 4};
  const Box box = Box::FromShape(shape);
  const InitSpec spec = Spec(InitKind::kNormal);
  const Tensor a = *InitializeBox(spec, 0, "w", shape, box, DType::kFloat32);
  EXPECT_NE(a, *InitializeBox(spec, 1, "w", shape, box, DType::kFloat32));
  EXPECT_NE(a, *InitializeBox(spec, 0, "w2", shape, box, DType::kFloat32));
  EXPECT_EQ(a, *InitializeBox(spec, 0, "w", shape, box, DType::kFloat32));
}

TEST(InitializerTest, NormalMoments) {
  const std::vector<int64_t> shape = {512, 512};
  ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(InitKind::kNormal, 0.02), 3, "n", shape,
                                               Box::FromShape(shape), DType::kFloat32));
  const Moments m = MomentsOf(t);
  EXPECT_NEAR(m.mean, 0.0, 0.02 * 5 / 512.0);
  EXPECT_NEAR(m.stddev, 0.02, 0.02 * 0.01);
  EXPECT_GT(m.max, 0.02 * 4);  // tails exist (not truncated)
}

TEST(InitializerTest, LecunNormalIsTruncatedWithJaxStddev) {
  const std::vector<int64_t> shape = {1024, 256};
  ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(InitKind::kLecunNormal), 3, "k", shape,
                                               Box::FromShape(shape), DType::kFloat32));
  const Moments m = MomentsOf(t);
  const double want = 1.0 / std::sqrt(1024.0);  // variance 1/fan_in after the rescale
  EXPECT_NEAR(m.mean, 0.0, want * 5 / 512.0);
  EXPECT_NEAR(m.stddev, want, want * 0.01);
  const double bound = 2.0 * want / 0.87962566103423978;
  EXPECT_LE(m.max, bound * (1 + 1e-6));
  EXPECT_GE(m.min, -bound * (1 + 1e-6));
  EXPECT_GT(m.max, bound * 0.99);
}

TEST(InitializerTest, XavierUniformBounds) {
  const std::vector<int64_t> shape = {300, 500};
  ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(InitKind::kXavierUniform), 5, "x", shape,
                                               Box::FromShape(shape), DType::kFloat32));
  const Moments m = MomentsOf(t);
  const double limit = std::sqrt(6.0 / 800.0);
  EXPECT_GE(m.min, -limit);
  EXPECT_LT(m.max, limit);
  EXPECT_GT(m.max, limit * 0.999);
  EXPECT_LT(m.min, -limit * 0.999);
  EXPECT_NEAR(m.stddev, limit / std::sqrt(3.0), limit * 0.01);
}

TEST(InitializerTest, UniformIsZeroToScale) {
  const std::vector<int64_t> shape = {100000};
  ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(InitKind::kUniform, 1, 0.01), 5, "u", shape,
                                               Box::FromShape(shape), DType::kFloat32));
  const Moments m = MomentsOf(t);
  EXPECT_GE(m.min, 0.0);
  EXPECT_LT(m.max, 0.01);
  EXPECT_NEAR(m.mean, 0.005, 0.0001);
}

TEST(InitializerTest, OnesAndZerosAcceptIntegerDtypes) {
  const std::vector<int64_t> shape = {3};
  ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(InitKind::kOnes), 0, "o", shape,
                                               Box::FromShape(shape), DType::kInt32));
  EXPECT_THAT(t.ToFloatVector(), ::testing::ElementsAre(1, 1, 1));
}

TEST(InitializerTest, Errors) {
  const std::vector<int64_t> shape = {4, 4};
  EXPECT_THAT(InitializeBox(Spec(InitKind::kNormal), 0, "w", shape, *ParseBox("[0:4]"),
                            DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "'w'"));
  EXPECT_THAT(InitializeBox(Spec(InitKind::kNormal), 0, "w", shape, *ParseBox("[2:6, 0:4]"),
                            DType::kFloat32),
              StatusIs(absl::StatusCode::kOutOfRange, "[2:6, 0:4]"));
  EXPECT_THAT(InitializeBox(Spec(InitKind::kNormal, -1), 0, "w", shape, Box::FromShape(shape),
                            DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "stddev -1"));
  EXPECT_THAT(InitializeBox(Spec(InitKind::kUniform), 0, "w", shape, Box::FromShape(shape),
                            DType::kInt32),
              StatusIs(absl::StatusCode::kInvalidArgument, "float dtype"));
  EXPECT_THAT(ParseInitKind("glorot"), StatusIs(absl::StatusCode::kInvalidArgument, "glorot"));
  EXPECT_THAT(ParseInitKind("lecun_normal"), ::meshserve::testing::IsOkAndHolds(InitKind::kLecunNormal));
}

TEST(InitializerTest, LargeBoxIsFast) {
  const std::vector<int64_t> shape = {4096, 8192};
  const Box box = *ParseBox("[2048:4096, 0:8192]");
  for (InitKind kind : {InitKind::kLecunNormal, InitKind::kXavierUniform}) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    ASSERT_OK_AND_ASSIGN(Tensor t, InitializeBox(Spec(kind), 0, "big", shape, box,
                                                 DType::kBFloat16));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << InitKindName(kind) << " 2048x8192 bf16: " << secs << " s wall, "
              << static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC
              << " s cpu\n";
    EXPECT_EQ(t.NumElements(), 2048 * 8192);
    // The threaded fill equals a single-threaded (small) box of the same rows.
    for (int64_t r : {0, 1000, 2047}) {
      const Box one({Interval{2048 + r, 2049 + r}, Interval{0, 8192}});
      ASSERT_OK_AND_ASSIGN(Tensor row, InitializeBox(Spec(kind), 0, "big", shape, one,
                                                     DType::kBFloat16));
      EXPECT_EQ(row.bytes(), t.bytes().substr(r * 8192 * 2, 8192 * 2)) << r;
    }
  }
}

}  // namespace
}  // namespace meshserve
