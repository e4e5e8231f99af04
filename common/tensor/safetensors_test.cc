#include "common/tensor/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "common/tensor/copy_box.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::AnyOf;

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/h4_st_", getpid(), "_", name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Tensor Iota(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  std::vector<float> v(t.NumElements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) - 100;
  return *Tensor::FromValues(dtype, shape, v);
}

// A file holding raw header JSON (and `data_bytes` zero bytes of data).
std::string WithHeader(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tensors_["w"] = Iota(DType::kFloat32, {6, 10});
    tensors_["b"] = Iota(DType::kBFloat16, {4, 3, 5});
    tensors_["ids"] = Iota(DType::kInt32, {7});
    tensors_["scalar"] = Iota(DType::kFloat64, {});
    tensors_["empty"] = Iota(DType::kFloat32, {0, 3});
    path_ = TempPath("roundtrip.safetensors");
    ASSERT_OK(WriteSafetensors(path_, tensors_, {{"format", "pt"}}));
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::map<std::string, Tensor> tensors_;
  std::string path_;
};

TEST_F(SafetensorsTest, RoundTrip) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  EXPECT_EQ(f.entries().size(), tensors_.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (const auto& [name, t] : tensors_) {
    ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    EXPECT_EQ(got, t) << name;
  }
  EXPECT_EQ(f.Find("nope"), nullptr);
  EXPECT_THAT(f.Read("nope"), StatusIs(absl::StatusCode::kNotFound, "'nope'"));
  // The header length is a multiple of 8 (as the reference writer pads).
  const std::string bytes = ReadAll(path_);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]) % 8, 0);
}

TEST_F(SafetensorsTest, ReadBoxMatchesExtractBox) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"w", "[2:5, 3:8]"}, {"w", "[1:4, 0:10]"}, {"w", "[0:6, 9:10]"}, {"w", "[3:3, 0:2]"},
           {"b", "[1:3, 0:3, 2:4]"}, {"b", "[0:4, 1:2, 0:5]"}, {"b", "[2:4, 0:3, 0:5]"},
           {"ids", "[6:7]"}, {"scalar", "[]"}}) {
    const Box box = *ParseBox(text);
    ASSERT_OK_AND_ASSIGN(Tensor got, f.ReadBox(name, box));
    const Tensor& full = tensors_.at(name);
    const BoxTensor src{Box::FromShape(full.shape()), full};
    ASSERT_OK_AND_ASSIGN(std::string want, ExtractBox(src, box));
    EXPECT_EQ(got.bytes(), want) << name << " " << text;
    EXPECT_EQ(got.shape(), box.shape());
  }
}

TEST_F(SafetensorsTest, ReadBoxConvertsDType) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  ASSERT_OK_AND_ASSIGN(Tensor got, f.ReadBox("b", *ParseBox("[0:1, 0:3, 0:5]"), DType::kFloat32));
  EXPECT_EQ(got.dtype(), DType::kFloat32);
  EXPECT_EQ(got.GetFloat(7), tensors_.at("b").GetFloat(7));
}

TEST_F(SafetensorsTest, ReadBoxErrors) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  EXPECT_THAT(f.ReadBox("w", *ParseBox("[0:7, 0:10]")),
              StatusIs(absl::StatusCode::kOutOfRange, "[0:7, 0:10]"));
  // Empty, yet its first dim runs past the tensor's 6 rows.
  EXPECT_THAT(f.ReadBox("w", *ParseBox("[5:7, 0:0]")),
              StatusIs(absl::StatusCode::kOutOfRange, "[5:7, 0:0]"));
  EXPECT_THAT(f.ReadBox("w", *ParseBox("[0:6]")),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank"));
  EXPECT_THAT(f.ReadBox("x", *ParseBox("[0:6]")), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SafetensorsTest, FileTruncatedAfterOpenIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  const std::string bytes = ReadAll(path_);
  ASSERT_EQ(truncate(path_.c_str(), static_cast<off_t>(bytes.size() - 4)), 0);
  const SafetensorsFile::Entry* last = nullptr;
  for (const auto& e : f.entries()) {
    if (last == nullptr || e.end > last->end) last = &e;
  }
  EXPECT_THAT(f.Read(last->name), StatusIs(absl::StatusCode::kDataLoss, path_));
}

TEST(SafetensorsOpenTest, MissingFileIsNotFound) {
  EXPECT_THAT(SafetensorsFile::Open("/nonexistent/x.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/x.safetensors"));
}

TEST(SafetensorsOpenTest, MalformedHeaders) {
  const std::string path = TempPath("bad.safetensors");
  struct Case {
    std::string header;
    size_t data;
    absl::StatusCode code;
    std::string substr;
  };
  const std::vector<Case> cases = {
      {"not json", 0, absl::StatusCode::kInvalidArgument, "not a JSON object"},
      {"[1, 2]", 0, absl::StatusCode::kInvalidArgument, "not a JSON object"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4,
       absl::StatusCode::kInvalidArgument, "tensor 'a'"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kInvalidArgument, "needs 12 bytes"},
      {R"({"a": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kInvalidArgument, "'Q8'"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kInvalidArgument, "non-negative"},
      {R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8,
       absl::StatusCode::kInvalidArgument, "non-negative"},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", 8, absl::StatusCode::kInvalidArgument,
       "data_offsets"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8,
       absl::StatusCode::kInvalidArgument, "outside"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12,
       absl::StatusCode::kInvalidArgument, "overlap"},
      {R"({"__metadata__": {"k": 1}})", 0, absl::StatusCode::kInvalidArgument, "'k'"},
      {R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296],
           "data_offsets": [0, 8]}})", 8, absl::StatusCode::kInvalidArgument, "too large"},
  };
  for (const Case& c : cases) {
    WriteAll(path, WithHeader(c.header, c.data));
    EXPECT_THAT(SafetensorsFile::Open(path), StatusIs(c.code, c.substr)) << c.header;
  }
  WriteAll(path, "abc");
  EXPECT_THAT(SafetensorsFile::Open(path), StatusIs(absl::StatusCode::kDataLoss, path));
  WriteAll(path, std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) + "{}");
  EXPECT_THAT(SafetensorsFile::Open(path), StatusIs(absl::StatusCode::kDataLoss, "truncated"));
  WriteAll(path, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8));
  EXPECT_THAT(SafetensorsFile::Open(path), StatusIs(absl::StatusCode::kInvalidArgument, "100 MB"));
  WriteAll(path, WithHeader("{}", 0));
  EXPECT_OK(SafetensorsFile::Open(path));
  std::remove(path.c_str());
}

// Every truncation and random byte flips: errors are InvalidArgument/DataLoss
// (or, for flips inside the data region, OK), never a crash.
TEST(SafetensorsFuzzTest, TruncationsAndByteFlips) {
  std::map<std::string, Tensor> tensors;
  tensors["alpha"] = Iota(DType::kFloat32, {3, 4});
  tensors["beta"] = Iota(DType::kBFloat16, {5});
  const std::string good_path = TempPath("fuzz_good.safetensors");
  ASSERT_OK(WriteSafetensors(good_path, tensors, {{"m", "v"}}));
  const std::string good = ReadAll(good_path);
  const std::string path = TempPath("fuzz.safetensors");
  auto exercise = [&](const std::string& bytes) {
    WriteAll(path, bytes);
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    if (!f.ok()) {
      EXPECT_THAT(f.status(), AnyOf(StatusIs(absl::StatusCode::kInvalidArgument, path),
                                    StatusIs(absl::StatusCode::kDataLoss, path)));
      return;
    }
    for (const auto& e : f->entries()) {
      absl::StatusOr<Tensor> t = f->Read(e.name, DType::kFloat32);
      if (!t.ok()) {
        EXPECT_THAT(t.status(), StatusIs(absl::StatusCode::kDataLoss));
      }
    }
  };
  for (size_t len = 0; len < good.size(); ++len) exercise(good.substr(0, len));
  std::mt19937 rng(99);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = good;
    const int flips = 1 + rng() % 3;
    for (int i = 0; i < flips; ++i) {
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
    }
    exercise(bytes);
  }
  std::remove(path.c_str());
  std::remove(good_path.c_str());
}

}  // namespace
}  // namespace meshserve
