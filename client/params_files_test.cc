// The streamed safetensors files of push and pull (params_files.h): a file
// read as PushParamsChunk messages, PullParamsChunk messages written as a
// file, and the stream rules the writer enforces.
#include "client/params_files.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/program/ir_conv.h"
#include "common/tensor/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/params_files_", getpid(), "_", name);
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

Tensor Iota(DType dtype, std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::Zeros(dtype, shape);
  std::vector<float> v(t.NumElements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i % 1000);
  return *Tensor::FromValues(dtype, shape, v);
}

// Reads every chunk of `path`; returns name -> concatenated bytes, checking
// the per-chunk rules on the way.
std::map<std::string, std::string> ReadAllChunks(const std::string& path, int64_t chunk_bytes,
                                                 int* num_chunks) {
  auto reader = PushChunkReader::Open(path, "mlp", chunk_bytes);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::map<std::string, std::string> got;
  std::string current;
  PushParamsChunk chunk;
  *num_chunks = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&chunk);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    ++*num_chunks;
    EXPECT_LE(static_cast<int64_t>(chunk.data().size()), chunk_bytes);
    if (chunk.byte_offset() == 0) {
      current = chunk.param();
      EXPECT_EQ(chunk.model(), "mlp");
      const SafetensorsFile::Entry* e = nullptr;
      for (const auto& entry : (*reader)->entries()) {
        if (entry.name == current) e = &entry;
      }
      EXPECT_NE(e, nullptr) << current;
      if (e == nullptr) break;
      EXPECT_EQ(std::vector<int64_t>(chunk.shape().begin(), chunk.shape().end()), e->shape);
      EXPECT_EQ(std::vector<int64_t>(chunk.offset().begin(), chunk.offset().end()),
                std::vector<int64_t>(e->shape.size(), 0));
      EXPECT_EQ(chunk.dtype(), DTypeToProto(e->dtype));
    } else {
      EXPECT_EQ(chunk.param(), "");  // only a box's first message names it
      EXPECT_EQ(chunk.shape_size(), 0);
    }
    EXPECT_EQ(chunk.byte_offset(), static_cast<int64_t>(got[current].size()));
    got[current] += chunk.data();
  }
  return got;
}

TEST(PushChunkReaderTest, StreamsEveryTensorAsOneBoxInBoundedChunks) {
  const std::string path = TempPath("push.safetensors");
  std::map<std::string, Tensor> tensors;
  tensors.emplace("w1", Iota(DType::kFloat32, {16, 40}, 1));     // 2560 bytes
  tensors.emplace("b", Iota(DType::kBFloat16, {3}, 5));          // 6 bytes
  tensors.emplace("empty", Iota(DType::kFloat32, {0, 4}, 0));   // 0 bytes
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  int num_chunks = 0;
  std::map<std::string, std::string> got = ReadAllChunks(path, 1000, &num_chunks);
  ASSERT_EQ(got.size(), 3u);
  for (const auto& [name, t] : tensors) EXPECT_EQ(got[name], std::string(t.bytes())) << name;
  // w1: 1000 + 1000 + 560; b and empty: one chunk each.
  EXPECT_EQ(num_chunks, 5);
  auto reader = PushChunkReader::Open(path, "mlp", 1000);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->total_bytes(), 2566);
  std::remove(path.c_str());
}

TEST(PushChunkReaderTest, ChunksHoldWholeElements) {
  const std::string path = TempPath("whole.safetensors");
  std::map<std::string, Tensor> tensors;
  tensors.emplace("w", Iota(DType::kFloat64, {10}, 0));
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  int num_chunks = 0;
  std::map<std::string, std::string> got = ReadAllChunks(path, 20, &num_chunks);  // 2 doubles
  EXPECT_EQ(got["w"], std::string(tensors.at("w").bytes()));
  EXPECT_EQ(num_chunks, 5);
  std::remove(path.c_str());
}

TEST(PushChunkReaderTest, RejectsMissingAndMalformedFiles) {
  EXPECT_THAT(PushChunkReader::Open(TempPath("nope.safetensors"), "mlp").status(),
              StatusIs(absl::StatusCode::kNotFound, "nope.safetensors"));
  const std::string path = TempPath("bad.safetensors");
  std::ofstream(path) << "not a safetensors file at all";
  EXPECT_THAT(PushChunkReader::Open(path, "mlp").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::remove(path.c_str());
}

PullParamsChunk First(std::string param, DType dtype, std::vector<int64_t> shape,
                      int64_t total_bytes, std::string data, int64_t version = 2) {
  PullParamsChunk c;
  c.set_param(std::move(param));
  c.set_dtype(static_cast<DTypeProto>(DTypeToProto(dtype)));
  for (int64_t d : shape) c.add_shape(d);
  c.set_total_bytes(total_bytes);
  c.set_data(std::move(data));
  c.set_version(version);
  return c;
}

PullParamsChunk Next(int64_t byte_offset, std::string data, int64_t version = 2) {
  PullParamsChunk c;
  c.set_byte_offset(byte_offset);
  c.set_data(std::move(data));
  c.set_version(version);
  return c;
}

TEST(PulledFileWriterTest, WritesASafetensorsFileInArrivalOrder) {
  const std::string path = TempPath("pull.safetensors");
  Tensor w = Iota(DType::kFloat32, {4, 3}, 7);  // 48 bytes
  Tensor b = Iota(DType::kBFloat16, {2}, 1);
  const std::string wb(w.bytes());
  auto writer = PulledFileWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Add(First("w", DType::kFloat32, {4, 3}, 48, wb.substr(0, 20))).ok());
  ASSERT_TRUE((*writer)->Add(Next(20, wb.substr(20, 28))).ok());
  ASSERT_TRUE((*writer)->Add(First("b", DType::kBFloat16, {2}, 4, std::string(b.bytes()))).ok());
  EXPECT_FALSE(Exists(path));  // not before Finish
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->version(), 2);
  EXPECT_EQ((*writer)->data_bytes(), 52);
  EXPECT_THAT((*writer)->params(), ElementsAre("w", "b"));
  writer->reset();
  EXPECT_FALSE(Exists(path + ".data.tmp"));
  ASSERT_OK_AND_ASSIGN(SafetensorsFile file, SafetensorsFile::Open(path));
  EXPECT_EQ(file.metadata().at("version"), "2");
  ASSERT_OK_AND_ASSIGN(Tensor w2, file.Read("w"));
  EXPECT_EQ(w2.shape(), w.shape());
  EXPECT_EQ(w2.bytes(), w.bytes());
  ASSERT_OK_AND_ASSIGN(Tensor b2, file.Read("b"));
  EXPECT_EQ(b2.dtype(), DType::kBFloat16);
  EXPECT_EQ(b2.bytes(), b.bytes());
  std::remove(path.c_str());
}

// Each broken stream is kInternal naming the param; no file appears.
TEST(PulledFileWriterTest, RejectsStreamsThatBreakTheContract) {
  struct Case {
    std::string what;
    std::vector<PullParamsChunk> chunks;
    std::string message;
  };
  const std::string eight(8, 'x');
  std::vector<Case> cases = {
      {"no param name", {Next(0, eight)}, "without a param name"},
      {"wrong total", {First("w", DType::kFloat32, {2}, 12, eight)}, "total_bytes 12, not 8"},
      {"gap", {First("w", DType::kFloat32, {4}, 16, eight), Next(12, "abcd")},
       "byte_offset 12 after 8"},
      {"too long", {First("w", DType::kFloat32, {1}, 4, eight)}, "passes its 4 bytes"},
      {"twice",
       {First("w", DType::kFloat32, {2}, 8, eight), First("w", DType::kFloat32, {2}, 8, eight)},
       "'w' sent twice"},
      {"cut short", {First("w", DType::kFloat32, {4}, 16, eight), First("v", DType::kFloat32, {2}, 8, eight)},
       "'w' ends after 8 of 16"},
      {"two versions", {First("w", DType::kFloat32, {4}, 16, eight), Next(8, eight, 3)},
       "version 3 after chunks of version 2"},
      {"bad dtype", {First("w", DType::kFloat32, {2}, 8, eight)}, "param 'w' has dtype 0"},
  };
  cases[7].chunks[0].set_dtype(static_cast<DTypeProto>(0));
  for (const Case& c : cases) {
    const std::string path = TempPath("bad_pull.safetensors");
    auto writer = PulledFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    absl::Status status;
    for (const PullParamsChunk& chunk : c.chunks) {
      status = (*writer)->Add(chunk);
      if (!status.ok()) break;
    }
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal, c.message)) << c.what;
    writer->reset();
    EXPECT_FALSE(Exists(path)) << c.what;
  }
}

TEST(PulledFileWriterTest, ShortLastParamFailsFinish) {
  const std::string path = TempPath("short.safetensors");
  auto writer = PulledFileWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Add(First("w", DType::kFloat32, {4}, 16, std::string(8, 'x'))).ok());
  EXPECT_THAT((*writer)->Finish(),
              StatusIs(absl::StatusCode::kInternal, "ends in param 'w' after 8 of 16"));
  writer->reset();
  EXPECT_FALSE(Exists(path));
}

TEST(PulledFileWriterTest, UnwritablePathIsUnavailable) {
  EXPECT_THAT(PulledFileWriter::Create("/nonexistent-dir/x.safetensors").status(),
              StatusIs(absl::StatusCode::kUnavailable, "/nonexistent-dir/x.safetensors"));
}

}  // namespace
}  // namespace client
}  // namespace meshserve
