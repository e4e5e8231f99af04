#include "common/tensor/copy_box.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

Box B(absl::string_view text) {
  absl::StatusOr<Box> b = ParseBox(text);
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

// A BoxTensor whose element at global index g has value Encode(g).
float Encode(const std::vector<int64_t>& g) {
  float v = 0;
  for (int64_t x : g) v = v * 100 + static_cast<float>(x);
  return v;
}

BoxTensor Filled(const Box& box, DType dtype = DType::kFloat32) {
  BoxTensor bt = *BoxTensor::Create(dtype, box);
  std::vector<float> values;
  std::vector<int64_t> g(box.rank());
  const int64_t n = box.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i;
    for (int d = box.rank() - 1; d >= 0; --d) {
      g[d] = box[d].begin + rem % box[d].size();
      rem /= box[d].size();
    }
    values.push_back(Encode(g));
  }
  bt.tensor = *Tensor::FromValues(dtype, box.shape(), values);
  return bt;
}

// Expected values of `sub`, row-major.
std::vector<float> Expected(const Box& sub) { return Filled(sub).tensor.ToFloatVector(); }

std::vector<float> AsFloats(const std::string& bytes, int64_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), bytes.data(), n * sizeof(float));
  return v;
}

TEST(CopyBoxTest, ExtractInnerBox) {
  const BoxTensor src = Filled(B("[10:14, 20:28]"));
  const Box sub = B("[11:13, 22:26]");
  ASSERT_OK_AND_ASSIGN(std::string bytes, ExtractBox(src, sub));
  ASSERT_EQ(bytes.size(), 8 * sizeof(float));
  EXPECT_EQ(AsFloats(bytes, 8), Expected(sub));
}

TEST(CopyBoxTest, ExtractFullRowsAndWholeBox) {
  const BoxTensor src = Filled(B("[0:4, 0:3, 0:5]"));
  for (absl::string_view s : {"[1:3, 0:3, 0:5]", "[0:4, 0:3, 0:5]", "[2:3, 1:2, 0:5]",
                              "[0:4, 1:3, 2:3]"}) {
    const Box sub = B(s);
    ASSERT_OK_AND_ASSIGN(std::string bytes, ExtractBox(src, sub));
    EXPECT_EQ(AsFloats(bytes, sub.NumElements()), Expected(sub)) << s;
  }
}

TEST(CopyBoxTest, RankZero) {
  BoxTensor src = *BoxTensor::Create(DType::kFloat32, Box());
  src.tensor.data<float>()[0] = 4.5f;
  ASSERT_OK_AND_ASSIGN(std::string bytes, ExtractBox(src, Box()));
  EXPECT_EQ(AsFloats(bytes, 1)[0], 4.5f);
  BoxTensor dst = *BoxTensor::Create(DType::kFloat32, Box());
  EXPECT_OK(InsertBox(&dst, Box(), bytes, /*accumulate=*/true));
  EXPECT_OK(InsertBox(&dst, Box(), bytes, /*accumulate=*/true));
  EXPECT_EQ(dst.tensor.data<float>()[0], 9.0f);
}

TEST(CopyBoxTest, EmptySubIsNoOp) {
  const BoxTensor src = Filled(B("[0:4, 0:4]"));
  ASSERT_OK_AND_ASSIGN(std::string bytes, ExtractBox(src, B("[2:2, 0:4]")));
  EXPECT_TRUE(bytes.empty());
}

TEST(CopyBoxTest, RandomRoundTrips) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + iter % 4;
    std::vector<Interval> held, sub;
    for (int d = 0; d < rank; ++d) {
      const int64_t b = rng() % 5, size = 1 + rng() % 5;
      held.push_back({b, b + size});
      const int64_t sb = b + rng() % size;
      sub.push_back({sb, sb + 1 + static_cast<int64_t>(rng() % (b + size - sb))});
    }
    const Box hb(held), sb(sub);
    const DType dtype = iter % 2 ? DType::kBFloat16 : DType::kFloat32;
    const BoxTensor src = Filled(hb, dtype);
    ASSERT_OK_AND_ASSIGN(std::string bytes, ExtractBox(src, sb));
    ASSERT_OK_AND_ASSIGN(Tensor got, Tensor::FromBytes(dtype, sb.shape(), bytes));
    EXPECT_EQ(got, Filled(sb, dtype).tensor) << hb << " " << sb;
    // Insert into a zero tensor over a different (larger) box, then extract back.
    std::vector<Interval> big;
    for (const Interval& iv : held) big.push_back({iv.begin - 1, iv.end + 2});
    BoxTensor dst = *BoxTensor::Create(dtype, Box(big));
    ASSERT_OK(InsertBox(&dst, sb, bytes, false));
    ASSERT_OK_AND_ASSIGN(std::string again, ExtractBox(dst, sb));
    EXPECT_EQ(again, bytes);
    // CopyBox directly gives the same as Insert(Extract).
    BoxTensor dst2 = *BoxTensor::Create(dtype, Box(big));
    ASSERT_OK(CopyBox(src, &dst2, sb, false));
    EXPECT_EQ(dst2.tensor, dst.tensor);
    // Elements outside sb are untouched (zero).
    float total = 0;
    for (float v : dst.tensor.ToFloatVector()) total += v != 0;
    int nonzero_expected = 0;
    for (float v : got.ToFloatVector()) nonzero_expected += v != 0;
    EXPECT_EQ(total, nonzero_expected);
  }
}

TEST(CopyBoxTest, AccumulateAddsInFloat32) {
  const Box box = B("[0:2, 0:3]");
  BoxTensor dst = *BoxTensor::Create(DType::kBFloat16, box);
  const Tensor ones = *Tensor::FromValues(DType::kBFloat16, {1, 3}, {1.0f, 2.0f, 256.0f});
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(InsertBox(&dst, B("[1:2, 0:3]"), ones.bytes(), /*accumulate=*/true));
  }
  EXPECT_THAT(dst.tensor.ToFloatVector(),
              ::testing::ElementsAre(0, 0, 0, 3.0f, 6.0f, 768.0f));
  BoxTensor f = Filled(box);
  BoxTensor acc = Filled(box);
  ASSERT_OK(CopyBox(f, &acc, B("[0:2, 1:3]"), /*accumulate=*/true));
  EXPECT_EQ(acc.tensor.GetFloat(1), 2 * f.tensor.GetFloat(1));
  EXPECT_EQ(acc.tensor.GetFloat(0), f.tensor.GetFloat(0));
}

TEST(CopyBoxTest, ErrorsNameTheBoxes) {
  const BoxTensor src = Filled(B("[0:4, 0:4]"));
  EXPECT_THAT(ExtractBox(src, B("[2:6, 0:4]")),
              StatusIs(absl::StatusCode::kOutOfRange, "[2:6, 0:4]"));
  EXPECT_THAT(ExtractBox(src, B("[0:2]")),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank"));
  BoxTensor dst = Filled(B("[0:4, 0:4]"));
  EXPECT_THAT(InsertBox(&dst, B("[0:2, 0:2]"), std::string(12, 'x'), false),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 16 bytes, got 12"));
  EXPECT_THAT(InsertBox(&dst, B("[3:5, 0:2]"), std::string(16, 'x'), false),
              StatusIs(absl::StatusCode::kOutOfRange, "[0:4, 0:4]"));
  BoxTensor other = *BoxTensor::Create(DType::kBFloat16, B("[0:4, 0:4]"));
  EXPECT_THAT(CopyBox(src, &other, B("[0:1, 0:1]"), false),
              StatusIs(absl::StatusCode::kInvalidArgument, "dtypes"));
  BoxTensor b = *BoxTensor::Create(DType::kBool, B("[0:1]"));
  EXPECT_THAT(InsertBox(&b, B("[0:1]"), std::string(1, '\1'), true),
              StatusIs(absl::StatusCode::kInvalidArgument, "accumulate"));
}

TEST(CopyBoxTest, BoxBytesRoundTripOnRawArrays) {
  // full = arange(24).reshape(4, 6) as int32; box = [1:3, 2:5].
  std::vector<int32_t> full(24);
  for (int i = 0; i < 24; ++i) full[i] = i;
  const Box box = B("[1:3, 2:5]");
  std::vector<int32_t> packed(6, -1);
  ASSERT_OK(ExtractBoxBytes(reinterpret_cast<const char*>(full.data()), {4, 6}, 4, box,
                            reinterpret_cast<char*>(packed.data())));
  EXPECT_EQ(packed, (std::vector<int32_t>{8, 9, 10, 14, 15, 16}));
  std::vector<int32_t> back(24, 0);
  ASSERT_OK(InsertBoxBytes(reinterpret_cast<char*>(back.data()), {4, 6}, 4, box,
                           reinterpret_cast<const char*>(packed.data())));
  for (int i = 0; i < 24; ++i) {
    const bool inside = i / 6 >= 1 && i / 6 < 3 && i % 6 >= 2 && i % 6 < 5;
    EXPECT_EQ(back[i], inside ? i : 0) << i;
  }
  EXPECT_THAT(ExtractBoxBytes(reinterpret_cast<const char*>(full.data()), {4, 6}, 4,
                              B("[3:5, 0:6]"), reinterpret_cast<char*>(back.data())),
              StatusIs(absl::StatusCode::kInternal));
}

}  // namespace
}  // namespace meshserve
