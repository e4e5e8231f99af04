#include "common/tensor/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/tensor/bfloat16.h"
#include "common/tensor/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

TEST(TensorTest, CreateIsZeroFilledAndAligned) {
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Create(DType::kFloat32, {3, 5}));
  EXPECT_EQ(t.NumElements(), 15);
  EXPECT_EQ(t.NumBytes(), 60);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kTensorAlignment, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_EQ(t.ToString(), "f32[3, 5]");
}

TEST(TensorTest, CreateRejectsNegativeDim) {
  EXPECT_THAT(Tensor::Create(DType::kFloat32, {2, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, "[2, -1]"));
}

TEST(TensorTest, CreateRejectsOverflow) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(Tensor::Create(DType::kFloat32, {big, big}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Tensor::Create(DType::kFloat64, {int64_t{1} << 61}),
              StatusIs(absl::StatusCode::kInvalidArgument, "too large"));
}

TEST(TensorTest, HugeAllocationIsResourceExhausted) {
  EXPECT_THAT(Tensor::Create(DType::kFloat32, {int64_t{1} << 60}),
              StatusIs(absl::StatusCode::kResourceExhausted, "f32[1152921504606846976]"));
}

TEST(TensorTest, ZeroSizeAndRankZero) {
  ASSERT_OK_AND_ASSIGN(Tensor empty, Tensor::Create(DType::kBFloat16, {0, 7}));
  EXPECT_EQ(empty.NumElements(), 0);
  EXPECT_EQ(empty.NumBytes(), 0);
  ASSERT_OK_AND_ASSIGN(Tensor scalar, Tensor::Create(DType::kInt64, {}));
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_EQ(scalar.NumBytes(), 8);
}

TEST(TensorTest, FromBytesChecksLength) {
  std::string bytes(24, '\0');
  EXPECT_OK(Tensor::FromBytes(DType::kFloat32, {2, 3}, bytes));
  EXPECT_THAT(Tensor::FromBytes(DType::kFloat32, {2, 3}, bytes.substr(0, 20)),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 24 bytes, got 20"));
}

TEST(TensorTest, FromBytesRoundTripsBytes) {
  const float values[] = {1.5f, -2.0f, 3.25f};
  absl::string_view bytes(reinterpret_cast<const char*>(values), sizeof(values));
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromBytes(DType::kFloat32, {3}, bytes));
  EXPECT_EQ(t.bytes(), bytes);
  EXPECT_THAT(t.ToFloatVector(), ElementsAre(1.5f, -2.0f, 3.25f));
}

TEST(TensorTest, CopyIsDeepMoveEmpties) {
  ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::FromValues(DType::kFloat32, {2}, {1, 2}));
  Tensor b = a;
  b.data<float>()[0] = 9;
  EXPECT_EQ(a.data<float>()[0], 1.0f);
  EXPECT_NE(a, b);
  Tensor c = std::move(a);
  EXPECT_EQ(c.data<float>()[0], 1.0f);
  EXPECT_EQ(a.NumBytes(), 0);  // NOLINT: moved-from state is documented
  Tensor d;
  d = c;
  EXPECT_EQ(d, c);
}

TEST(TensorTest, SetShapeKeepsBytes) {
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(DType::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5}));
  EXPECT_OK(t.SetShape({3, 2}));
  EXPECT_THAT(t.shape(), ElementsAre(3, 2));
  EXPECT_EQ(t.GetFloat(5), 5.0f);
  EXPECT_THAT(t.SetShape({4}), StatusIs(absl::StatusCode::kInvalidArgument, "[4]"));
}

TEST(TensorTest, ConvertDTypeRoundTrips) {
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(DType::kFloat32, {4}, {1.0f, -2.5f, 3.0f, 7.9f}));
  ASSERT_OK_AND_ASSIGN(Tensor b, ConvertDType(t, DType::kBFloat16));
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_THAT(b.ToFloatVector(), ElementsAre(1.0f, -2.5f, 3.0f, 7.90625f));
  ASSERT_OK_AND_ASSIGN(Tensor i, ConvertDType(t, DType::kInt32));
  EXPECT_THAT(i.ToFloatVector(), ElementsAre(1, -2, 3, 7));
  ASSERT_OK_AND_ASSIGN(Tensor h, ConvertDType(t, DType::kFloat16));
  EXPECT_THAT(h.ToFloatVector(), ElementsAre(1.0f, -2.5f, 3.0f, 7.8984375f));
}

TEST(TensorTest, ConvertInt64ToInt32Saturates) {
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Create(DType::kInt64, {3}));
  t.data<int64_t>()[0] = int64_t{1} << 40;
  t.data<int64_t>()[1] = -7;
  t.data<int64_t>()[2] = 123456789012;
  ASSERT_OK_AND_ASSIGN(Tensor i, ConvertDType(t, DType::kInt32));
  EXPECT_EQ(i.data<int32_t>()[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i.data<int32_t>()[1], -7);
  ASSERT_OK_AND_ASSIGN(Tensor back, ConvertDType(i, DType::kInt64));
  EXPECT_EQ(back.data<int64_t>()[1], -7);
  ASSERT_OK_AND_ASSIGN(Tensor f64, ConvertDType(t, DType::kFloat64));
  EXPECT_EQ(f64.data<double>()[2], 123456789012.0);
}

TEST(TensorTest, PooledBuffersAreZeroedAgainAndHugeShapesAreStatuses) {
  {
    // Dirty a pooled buffer, free it, and take it again: Zeros still zeroes.
    Tensor ones = Tensor::Zeros(DType::kFloat32, {int64_t{4} << 20});
    std::memset(ones.data<float>(), 0xff, ones.NumBytes());
  }
  Tensor t = Tensor::Zeros(DType::kFloat32, {int64_t{4} << 20});
  const float* p = t.data<float>();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < t.NumElements(); ++i) nonzero += p[i] != 0.0f;
  EXPECT_EQ(nonzero, 0);
  EXPECT_THAT(Tensor::Create(DType::kFloat32, {int64_t{1} << 60}),
              StatusIs(absl::StatusCode::kResourceExhausted, "tensor f32[1152921504606846976]"));
}

TEST(BoxTensorTest, CreateAndWrap) {
  ASSERT_OK_AND_ASSIGN(Box box, ParseBox("[2:4, 0:3]"));
  ASSERT_OK_AND_ASSIGN(BoxTensor bt, BoxTensor::Create(DType::kFloat32, box));
  EXPECT_THAT(bt.tensor.shape(), ElementsAre(2, 3));
  EXPECT_EQ(bt.ToString(), "f32[2, 3] @ [2:4, 0:3]");
  ASSERT_OK_AND_ASSIGN(Tensor wrong, Tensor::Create(DType::kFloat32, {3, 2}));
  EXPECT_THAT(BoxTensor::Wrap(box, wrong),
              StatusIs(absl::StatusCode::kInvalidArgument, "[2:4, 0:3]"));
  EXPECT_THAT(BoxTensor::Create(DType::kFloat32, Box({Interval{3, 1}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace meshserve
