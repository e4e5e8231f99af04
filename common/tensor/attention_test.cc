// Positions, Rope and MaskedSoftmax (attention.cc) against naive loops in
// double, on whole arrays and on shards given their global offsets.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/tensor/kernels.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

Tensor Random(std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return *Tensor::FromValues(DType::kFloat32, shape, v);
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(PositionsTest, CountsTheGlobalIndexAlongTheAxis) {
  ASSERT_OK_AND_ASSIGN(Tensor p, Positions({2, 3, 4}, 1, 5));
  ASSERT_EQ(p.dtype(), DType::kInt32);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 3; ++s) {
      for (int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(p.data<int32_t>()[(b * 3 + s) * 4 + k], 5 + s);
      }
    }
  }
  ASSERT_OK_AND_ASSIGN(Tensor last, Positions({2, 3}, -1, 0));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(last.data<int32_t>()[i], i % 3);
  EXPECT_THAT(Positions({2, 3}, 2, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 "axis 2 is out of range"));
}

// out[b, s, h, i] per the rotate_half formula, in double.
std::vector<double> NaiveRope(const Tensor& x, int64_t seq_offset, double theta) {
  const int64_t B = x.dim(0), S = x.dim(1), H = x.dim(2), D = x.dim(3), half = D / 2;
  std::vector<float> v = x.ToFloatVector();
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const double a = (seq_offset + s) * std::pow(theta, -2.0 * i / D);
          out[row + i] = v[row + i] * std::cos(a) - v[row + i + half] * std::sin(a);
          out[row + i + half] = v[row + i + half] * std::cos(a) + v[row + i] * std::sin(a);
        }
      }
    }
  }
  return out;
}

TEST(RopeTest, MatchesTheRotateHalfFormula) {
  Tensor x = Random({2, 7, 3, 8}, 1);
  ASSERT_OK_AND_ASSIGN(Tensor y, Rope(x, 1, 0, 10000.0, DType::kFloat32));
  ExpectNear(y.ToFloatVector(), NaiveRope(x, 0, 10000.0), 1e-5);
  // A shard of the sequence starting at global position 11 (theta of Llama 3).
  ASSERT_OK_AND_ASSIGN(Tensor z, Rope(x, -3, 11, 500000.0, DType::kFloat32));
  ExpectNear(z.ToFloatVector(), NaiveRope(x, 11, 500000.0), 1e-5);
}

TEST(RopeTest, RejectsBadShapesAndAxes) {
  EXPECT_THAT(Rope(Random({2, 3, 5}, 2), 1, 0, 1e4, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "even last dim"));
  EXPECT_THAT(Rope(Random({2, 4}, 2), 1, 0, 1e4, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "seq_axis 1 is the rotated"));
  EXPECT_THAT(Rope(Random({2, 4}, 2), 0, 0, -1, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "theta -1"));
}

// softmax over the last dim of [B, Q, K] with scale, causal (global offsets)
// and a [K] or [Q, K] keep mask, in double; fully masked rows are 0.
std::vector<double> NaiveSoftmax(const Tensor& x, double scale, bool causal, int64_t q_offset,
                                 int64_t k_offset, const std::vector<float>* keep) {
  const int64_t B = x.dim(0), Q = x.dim(1), K = x.dim(2);
  std::vector<float> v = x.ToFloatVector();
  std::vector<double> out(v.size(), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t q = 0; q < Q; ++q) {
      auto kept = [&](int64_t k) {
        if (causal && k_offset + k > q_offset + q) return false;
        if (keep == nullptr) return true;
        const size_t i = keep->size() == static_cast<size_t>(K) ? k : q * K + k;
        return (*keep)[i] != 0;
      };
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        if (kept(k)) mx = std::max(mx, scale * v[(b * Q + q) * K + k]);
      }
      for (int64_t k = 0; k < K; ++k) {
        if (kept(k)) sum += std::exp(scale * v[(b * Q + q) * K + k] - mx);
      }
      for (int64_t k = 0; k < K; ++k) {
        if (kept(k)) out[(b * Q + q) * K + k] = std::exp(scale * v[(b * Q + q) * K + k] - mx) / sum;
      }
    }
  }
  return out;
}

TEST(MaskedSoftmaxTest, ScaleAndCausalMatchNaive) {
  Tensor x = Random({2, 5, 5}, 3);
  SoftmaxOptions o;
  o.scale = 0.125f;
  o.causal = true;
  ASSERT_OK_AND_ASSIGN(Tensor y, MaskedSoftmax(x, -1, o, nullptr, DType::kFloat32));
  ExpectNear(y.ToFloatVector(), NaiveSoftmax(x, 0.125, true, 0, 0, nullptr), 1e-6);
  // Row 0 keeps only k = 0.
  EXPECT_FLOAT_EQ(y.ToFloatVector()[0], 1.0f);
  EXPECT_FLOAT_EQ(y.ToFloatVector()[1], 0.0f);
}

TEST(MaskedSoftmaxTest, ShardOfTheQueryDimUsesItsGlobalOffset) {
  // Queries 3..5 of a 6 x 6 score matrix: its rows keep k <= 3, 4, 5.
  Tensor x = Random({1, 3, 6}, 4);
  SoftmaxOptions o;
  o.causal = true;
  o.q_offset = 3;
  ASSERT_OK_AND_ASSIGN(Tensor y, MaskedSoftmax(x, 2, o, nullptr, DType::kFloat32));
  ExpectNear(y.ToFloatVector(), NaiveSoftmax(x, 1.0, true, 3, 0, nullptr), 1e-6);
}

TEST(MaskedSoftmaxTest, WhereBroadcastsAndMaskedEntriesAreZero) {
  Tensor x = Random({2, 3, 4}, 5);
  std::vector<float> keep1 = {1, 0, 1, 1};
  Tensor w1 = *Tensor::FromValues(DType::kInt32, {4}, keep1);
  ASSERT_OK_AND_ASSIGN(Tensor y1, MaskedSoftmax(x, -1, {}, &w1, DType::kFloat32));
  ExpectNear(y1.ToFloatVector(), NaiveSoftmax(x, 1.0, false, 0, 0, &keep1), 1e-6);
  // A [Q, K] mask whose row 1 is all masked, with causal: that row is all 0.
  std::vector<float> keep2 = {1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1};
  Tensor w2 = *Tensor::FromValues(DType::kFloat32, {3, 4}, keep2);
  SoftmaxOptions o;
  o.causal = true;
  o.scale = 2.0f;
  ASSERT_OK_AND_ASSIGN(Tensor y2, MaskedSoftmax(x, -1, o, &w2, DType::kFloat32));
  ExpectNear(y2.ToFloatVector(), NaiveSoftmax(x, 2.0, true, 0, 0, &keep2), 1e-6);
  Tensor bad = *Tensor::FromValues(DType::kFloat32, {3}, std::vector<float>{1, 1, 1});
  EXPECT_THAT(MaskedSoftmax(x, -1, {}, &bad, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, "broadcast"));
}

}  // namespace
}  // namespace meshserve
