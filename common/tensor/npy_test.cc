#include "common/tensor/npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

// A .npy file as numpy writes it: v1, header padded with spaces to a multiple
// of 64 total bytes, ending in '\n'.
std::string NumpyStyle(absl::string_view dict, absl::string_view data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header(dict);
  const size_t total = ((prefix + header.size() + 1 + 63) / 64) * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t n = header.size();
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return out + header + std::string(data);
}

std::string FloatBytes(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

TEST(NpyTest, ParsesNumpyOutput) {
  const std::string file = NumpyStyle(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      FloatBytes({1, 2, 3, 4, 5, 6}));
  ASSERT_OK_AND_ASSIGN(Tensor t, ParseNpy(file));
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_THAT(t.shape(), ElementsAre(2, 3));
  EXPECT_THAT(t.ToFloatVector(), ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST(NpyTest, ParsesVersion2RankOneAndScalar) {
  const int64_t ids[] = {7, -1, 1LL << 40};
  ASSERT_OK_AND_ASSIGN(
      Tensor t, ParseNpy(NumpyStyle("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                                    std::string(reinterpret_cast<const char*>(ids), 24), 2)));
  EXPECT_EQ(t.dtype(), DType::kInt64);
  EXPECT_EQ(t.data<int64_t>()[2], 1LL << 40);
  ASSERT_OK_AND_ASSIGN(
      Tensor s, ParseNpy(NumpyStyle("{\"descr\": \"<f8\", \"shape\": (), \"fortran_order\": False}",
                                    std::string(8, '\0'))));
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.dtype(), DType::kFloat64);
}

TEST(NpyTest, RoundTripsEveryDType) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32,
                      DType::kInt64, DType::kInt8, DType::kUInt8, DType::kBool}) {
    ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(dtype, {2, 2}, {1, 0, 3, 1}));
    const std::string bytes = EncodeNpy(t);
    EXPECT_EQ(bytes.size() % 64, static_cast<size_t>(t.NumBytes()) % 64) << dtype;
    ASSERT_OK_AND_ASSIGN(Tensor back, ParseNpy(bytes));
    EXPECT_EQ(back, t) << dtype;
  }
  ASSERT_OK_AND_ASSIGN(Tensor r1, Tensor::FromValues(DType::kFloat32, {3}, {1, 2, 3}));
  EXPECT_NE(EncodeNpy(r1).find("'shape': (3,)"), std::string::npos);
}

TEST(NpyTest, Bfloat16IsWidenedToFloat32) {
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(DType::kBFloat16, {2}, {1.5f, -3.0f}));
  ASSERT_OK_AND_ASSIGN(Tensor back, ParseNpy(EncodeNpy(t)));
  EXPECT_EQ(back.dtype(), DType::kFloat32);
  EXPECT_THAT(back.ToFloatVector(), ElementsAre(1.5f, -3.0f));
}

TEST(NpyTest, FileRoundTrip) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/h4_npy_", getpid(), ".npy");
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(DType::kFloat32, {2, 1, 2}, {1, 2, 3, 4}));
  ASSERT_OK(WriteNpy(path, t));
  ASSERT_OK_AND_ASSIGN(Tensor back, ReadNpy(path));
  EXPECT_EQ(back, t);
  std::remove(path.c_str());
  EXPECT_THAT(ReadNpy(path), StatusIs(absl::StatusCode::kNotFound, path));
  EXPECT_THAT(WriteNpy("/nonexistent/dir/x.npy", t), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(NpyTest, LayoutPointsAtTheDataWithoutCopyingIt) {
  const std::string f4 = FloatBytes({1, 2, 3, 4, 5, 6});
  for (int major : {1, 2}) {
    const std::string file =
        NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4, major);
    ASSERT_OK_AND_ASSIGN(NpyLayout layout, ParseNpyLayout(file, "x.npy"));
    EXPECT_EQ(layout.dtype, DType::kFloat32);
    EXPECT_THAT(layout.shape, ElementsAre(2, 3));
    EXPECT_EQ(file.substr(layout.data_offset), f4);
    EXPECT_EQ(layout.data_offset % 64, 0u);
  }
  EXPECT_THAT(ParseNpyLayout(NumpyStyle("{'descr': '<f4', 'fortran_order': False, "
                                        "'shape': (3,), }", FloatBytes({1})), "y.npy"),
              StatusIs(absl::StatusCode::kDataLoss, "npy 'y.npy'"));
}

TEST(NpyTest, WriteNpyBytesWritesTheHeaderThenTheBytes) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/npy_bytes_", getpid(), ".npy");
  const std::string i4("\x01\x00\x00\x00\xff\xff\xff\xff", 8);
  ASSERT_OK(WriteNpyBytes(path, DType::kInt32, {2, 1}, i4));
  ASSERT_OK_AND_ASSIGN(Tensor back, ReadNpy(path));
  EXPECT_EQ(back.dtype(), DType::kInt32);
  EXPECT_THAT(back.shape(), ElementsAre(2, 1));
  EXPECT_EQ(back.bytes(), i4);
  ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromValues(DType::kFloat32, {2, 1}, {1, -1}));
  EXPECT_EQ(EncodeNpyHeader(DType::kFloat32, {2, 1}) + std::string(t.bytes()), EncodeNpy(t));
  std::remove(path.c_str());
  EXPECT_THAT(WriteNpyBytes(path, DType::kBFloat16, {2}, "abcd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "bfloat16"));
  EXPECT_THAT(WriteNpyBytes("/nonexistent/dir/x.npy", DType::kInt32, {2, 1}, i4),
              StatusIs(absl::StatusCode::kUnavailable, "/nonexistent/dir/x.npy"));
}

TEST(NpyTest, Errors) {
  const std::string f4 = FloatBytes({1, 2});
  struct Case {
    std::string file;
    absl::StatusCode code;
    std::string substr;
  };
  const std::vector<Case> cases = {
      {NumpyStyle("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
       absl::StatusCode::kInvalidArgument, "big-endian"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4),
       absl::StatusCode::kInvalidArgument, "fortran_order"},
      {NumpyStyle("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", f4),
       absl::StatusCode::kInvalidArgument, "'<c8'"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4),
       absl::StatusCode::kDataLoss, "needs 12"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", f4),
       absl::StatusCode::kInvalidArgument, "needs 4"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False}", f4),
       absl::StatusCode::kInvalidArgument, "lacks"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4),
       absl::StatusCode::kInvalidArgument, "unknown key 'x'"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", f4),
       absl::StatusCode::kInvalidArgument, "malformed"},
      {NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f4),
       absl::StatusCode::kInvalidArgument, "too large"},
      {"PK\x03\x04 not npy", absl::StatusCode::kInvalidArgument, "magic"},
      {std::string("\x93NUMPY\x07\x00\x10\x00", 10), absl::StatusCode::kInvalidArgument, "version 7"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseNpy(c.file, "x.npy"), StatusIs(c.code, c.substr)) << c.file;
    EXPECT_THAT(ParseNpy(c.file, "x.npy"), StatusIs(c.code, "npy 'x.npy'"));
  }
  const std::string good =
      NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4);
  for (size_t len = 0; len < good.size(); ++len) {
    absl::StatusOr<Tensor> t = ParseNpy(good.substr(0, len));
    EXPECT_FALSE(t.ok()) << len;
  }
}

}  // namespace
}  // namespace meshserve
