// NamedTensor::Create's checks (byte counts, negative and huge shapes, named in
// the error) and ToFloat32 against hand-computed IEEE bit patterns.
#include "common/tensor/named_tensor.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::meshserve::testing::StatusIs;

TEST(NamedTensorTest, CreateKeepsTheFields) {
  std::string bytes(2 * 3 * 4, '\x01');
  ASSERT_OK_AND_ASSIGN(NamedTensor t, NamedTensor::Create("x", DType::kFloat32, {2, 3}, bytes));
  EXPECT_EQ(t.name, "x");
  EXPECT_EQ(t.dtype, DType::kFloat32);
  EXPECT_THAT(t.shape, ElementsAre(2, 3));
  EXPECT_EQ(t.bytes, bytes);
  EXPECT_EQ(t.NumElements(), 6);
}

TEST(NamedTensorTest, ByteCountMismatchNamesTensorShapeAndBothCounts) {
  absl::StatusOr<NamedTensor> t =
      NamedTensor::Create("ids", DType::kInt64, {2, 5}, std::string(79, '\0'));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("tensor 'ids'"));
  EXPECT_THAT(t.status().message(), HasSubstr("int64[2,5]"));
  EXPECT_THAT(t.status().message(), HasSubstr("needs 80 bytes, got 79"));
  EXPECT_THAT(NamedTensor::Create("x", DType::kBFloat16, {3}, std::string(4, '\0')),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 6 bytes, got 4"));
}

TEST(NamedTensorTest, NegativeAndHugeShapesAreRejected) {
  EXPECT_THAT(NamedTensor::Create("x", DType::kFloat32, {2, -1}, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "tensor 'x': negative dim"));
  EXPECT_THAT(NamedTensor::Create("x", DType::kUInt8, {int64_t{1} << 40, int64_t{1} << 20}, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "too large"));
  // A zero dim makes it empty, whatever the other dims (no overflow error).
  EXPECT_OK(NamedTensor::Create("x", DType::kUInt8, {2920000008552922, 2, 0, 7}, "").status());
  // A scalar holds one element.
  EXPECT_OK(NamedTensor::Create("s", DType::kInt32, {}, std::string(4, '\0')).status());
}

TEST(NamedTensorTest, ToFloat32OfAnEmptyTensorIsEmpty) {
  // No bytes (a zero dim): nothing to copy (memcpy must not get a null
  // pointer; found by rest_infer_request_fuzz under UBSan).
  NamedTensor empty;
  empty.name = "e";
  empty.dtype = DType::kFloat32;
  empty.shape = {0, 3};
  absl::StatusOr<std::vector<float>> values = empty.ToFloat32();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(values->empty());
}

TEST(NamedTensorTest, ToFloat32WidensEachDType) {
  // bfloat16 1.0 = 0x3F80, -2.5 = 0xC020 (little-endian bytes).
  ASSERT_OK_AND_ASSIGN(NamedTensor bf, NamedTensor::Create("b", DType::kBFloat16, {2},
                                                           {'\x80', '\x3F', '\x20', '\xC0'}));
  EXPECT_THAT(*bf.ToFloat32(), ElementsAre(1.0f, -2.5f));
  std::vector<int64_t> ints = {-3, 1 << 20};
  std::string bytes(16, '\0');
  std::memcpy(&bytes[0], ints.data(), 16);
  ASSERT_OK_AND_ASSIGN(NamedTensor i64, NamedTensor::Create("i", DType::kInt64, {2}, bytes));
  EXPECT_THAT(*i64.ToFloat32(), ElementsAre(-3.0f, 1048576.0f));
  double d = 0.1;
  std::memcpy(&bytes[0], &d, 8);
  ASSERT_OK_AND_ASSIGN(NamedTensor f64,
                       NamedTensor::Create("d", DType::kFloat64, {1}, bytes.substr(0, 8)));
  EXPECT_THAT(*f64.ToFloat32(), ElementsAre(0.1f));
  ASSERT_OK_AND_ASSIGN(NamedTensor u8, NamedTensor::Create("u", DType::kUInt8, {1}, "\x01"));
  EXPECT_THAT(u8.ToFloat32(), StatusIs(absl::StatusCode::kInvalidArgument,
                                       "tensor 'u': cannot convert uint8"));
}

}  // namespace
}  // namespace meshserve
