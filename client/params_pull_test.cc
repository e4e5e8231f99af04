// Box pulls without a server: BoxFileWriter (params_files.h) writing pieces
// of a box into place, chunk by chunk and in any order, checked element by
// element against an independent reference (the expected value of every
// element of the file computed from its global index), and the --offset /
// --shape parsing of the pull command (CliArgs::GetDims).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_args.h"
#include "client/params_files.h"
#include "common/tensor/safetensors.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::StatusIs;

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/params_pull_", getpid(), "_", name);
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// The value every element of tensor `t` should hold: a function of its
// global row-major index.
int32_t Expected(int t, int64_t index) { return static_cast<int32_t>(t * 1000003 + index * 7); }

// The bytes of the piece [offset, offset + shape) of tensor t (of `full`
// shape), row-major, computed element by element.
std::string PieceBytes(int t, const std::vector<int64_t>& full, const std::vector<int64_t>& offset,
                       const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string bytes(static_cast<size_t>(n * 4), '\0');
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e;
    int64_t global = 0;
    int64_t stride = 1;
    for (size_t d = full.size(); d-- > 0;) {
      global += (offset[d] + rest % shape[d]) * stride;
      rest /= shape[d];
      stride *= full[d];
    }
    const int32_t v = Expected(t, global);
    std::memcpy(&bytes[static_cast<size_t>(e * 4)], &v, 4);
  }
  return bytes;
}

struct Piece {
  int tensor;
  std::vector<int64_t> offset, shape;
};

// Places every piece in chunks of `chunk` bytes, pieces and chunks in a
// shuffled order, then checks the file against Expected.
void PlaceAndCheck(const std::vector<PulledTensor>& tensors, const std::vector<Piece>& pieces,
                   int64_t chunk, const std::string& name) {
  const std::string path = TempPath(name);
  auto writer = BoxFileWriter::Create(path, tensors, 9);
  ASSERT_TRUE(writer.ok()) << writer.status();
  struct Write {
    const Piece* piece;
    int64_t at;
    std::string bytes;
  };
  std::vector<Write> writes;
  for (const Piece& p : pieces) {
    const std::string bytes = PieceBytes(p.tensor, tensors[p.tensor].shape, p.offset, p.shape);
    for (int64_t at = 0; at < static_cast<int64_t>(bytes.size()); at += chunk) {
      writes.push_back(Write{&p, at, bytes.substr(static_cast<size_t>(at), chunk)});
    }
  }
  std::shuffle(writes.begin(), writes.end(), std::mt19937(7));
  for (const Write& w : writes) {
    ASSERT_TRUE((*writer)->Place(w.piece->tensor, w.piece->offset, w.piece->shape, w.at,
                                 w.bytes).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_FALSE(Exists(path + ".tmp"));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), tensors.size());
  EXPECT_EQ(file->metadata().at("version"), "9");
  for (size_t t = 0; t < tensors.size(); ++t) {
    const SafetensorsFile::Entry* e = file->Find(tensors[t].name);
    ASSERT_NE(e, nullptr) << tensors[t].name;
    EXPECT_EQ(e->shape, tensors[t].shape);
    auto read = file->Read(e->name);
    ASSERT_TRUE(read.ok()) << read.status();
    const std::vector<int64_t> origin(e->shape.size(), 0);
    EXPECT_EQ(std::string(read->bytes()),
              PieceBytes(static_cast<int>(t), e->shape, origin, e->shape))
        << "tensor " << e->name;
  }
  std::remove(path.c_str());
}

TEST(BoxFileWriterTest, ColumnPiecesRowPiecesAndScalarsLandInPlace) {
  // Tensor 0 in column halves (strided runs, one per row), tensor 1 in row
  // blocks (one run per chunk), tensor 2 in a 3-d grid of uneven cells,
  // tensor 3 a scalar, tensor 4 empty.
  std::vector<PulledTensor> tensors = {{"cols", DType::kInt32, {6, 10}},
                                       {"rows", DType::kInt32, {9, 4}},
                                       {"grid", DType::kInt32, {3, 5, 4}},
                                       {"scalar", DType::kInt32, {}},
                                       {"empty", DType::kInt32, {0, 3}}};
  std::vector<Piece> pieces = {{0, {0, 0}, {6, 3}}, {0, {0, 3}, {6, 7}},
                               {1, {0, 0}, {2, 4}}, {1, {2, 0}, {7, 4}},
                               {3, {}, {}}};
  for (int64_t a : {0, 1}) {
    for (int64_t b : {0, 2}) {
      for (int64_t c : {0, 3}) {
        pieces.push_back(Piece{2, {a, b, c}, {a == 0 ? 1 : 2, b == 0 ? 2 : 3, c == 0 ? 3 : 1}});
      }
    }
  }
  for (int64_t chunk : {4, 12, 20, 1 << 20}) {
    PlaceAndCheck(tensors, pieces, chunk, absl::StrCat("mixed_", chunk));
  }
}

TEST(BoxFileWriterTest, PiecesPlacedFromSeveralThreadsAtOnce) {
  // One thread per holder, as PullBoxesToFile reads them: 4 column quarters
  // of a [64, 96] tensor and 4 row quarters of a [32, 8] one, 20-byte chunks.
  const std::vector<PulledTensor> tensors = {{"cols", DType::kInt32, {64, 96}},
                                             {"rows", DType::kInt32, {32, 8}}};
  const std::string path = TempPath("threads");
  auto writer = BoxFileWriter::Create(path, tensors, 3);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(4);
  for (int h = 0; h < 4; ++h) {
    threads.emplace_back([&, h] {
      const std::vector<Piece> mine = {{0, {0, 24 * h}, {64, 24}}, {1, {8 * h, 0}, {8, 8}}};
      for (const Piece& p : mine) {
        const std::string bytes = PieceBytes(p.tensor, tensors[p.tensor].shape, p.offset,
                                             p.shape);
        for (size_t at = 0; at < bytes.size() && status[h].ok(); at += 20) {
          status[h] = (*writer)->Place(p.tensor, p.offset, p.shape, static_cast<int64_t>(at),
                                       bytes.substr(at, 20));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((*writer)->Finish().ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (size_t t = 0; t < tensors.size(); ++t) {
    auto read = file->Read(tensors[t].name);
    ASSERT_TRUE(read.ok()) << read.status();
    const std::vector<int64_t> origin(2, 0);
    EXPECT_EQ(std::string(read->bytes()),
              PieceBytes(static_cast<int>(t), tensors[t].shape, origin, tensors[t].shape));
  }
  std::remove(path.c_str());
}

TEST(BoxFileWriterTest, BadPlacementsAreRefusedNamingTheValues) {
  const std::string path = TempPath("bad");
  auto writer = BoxFileWriter::Create(path, {{"w", DType::kFloat32, {4, 6}}}, 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string four(16, 'x');
  EXPECT_THAT((*writer)->Place(1, {0, 0}, {1, 4}, 0, four),
              StatusIs(absl::StatusCode::kOutOfRange, "tensor index 1"));
  EXPECT_THAT((*writer)->Place(0, {0}, {4}, 0, four),
              StatusIs(absl::StatusCode::kInvalidArgument, "rank 2"));
  EXPECT_THAT((*writer)->Place(0, {3, 4}, {2, 2}, 0, four),
              StatusIs(absl::StatusCode::kOutOfRange, "outside tensor 'w' of shape [4,6]"));
  EXPECT_THAT((*writer)->Place(0, {0, 0}, {1, 4}, 2, four),
              StatusIs(absl::StatusCode::kInvalidArgument, "not whole float32 elements"));
  EXPECT_THAT((*writer)->Place(0, {0, 0}, {1, 4}, 4, four),
              StatusIs(absl::StatusCode::kOutOfRange, "pass the 16 bytes"));
  ASSERT_TRUE((*writer)->Place(0, {0, 0}, {1, 4}, 0, four).ok());
  EXPECT_THAT((*writer)->Finish(),
              StatusIs(absl::StatusCode::kDataLoss, "tensor 'w' got 16 of its 96 bytes"));
  writer->reset();
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));
  EXPECT_THAT(BoxFileWriter::Create(path, {{"a", DType::kFloat32, {1}},
                                           {"a", DType::kFloat32, {1}}}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "'a' twice"));
  EXPECT_THAT(BoxFileWriter::Create("/nonexistent/dir/x.safetensors", {}, 0).status(),
              StatusIs(absl::StatusCode::kUnavailable, "/nonexistent/dir/x.safetensors.tmp"));
}

TEST(PullFlagsTest, DimsParseAndBadListsNameTheFlag) {
  std::vector<std::string> argv_text = {"pull", "--offset", "4, 0,16", "--shape", "2,x"};
  std::vector<char*> argv;
  for (std::string& s : argv_text) argv.push_back(s.data());
  auto args = CliArgs::Parse(static_cast<int>(argv.size()), argv.data(),
                             {{"offset"}, {"shape"}, {"version"}});
  ASSERT_TRUE(args.ok()) << args.status();
  auto offset = args->GetDims("offset");
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, (std::vector<int64_t>{4, 0, 16}));
  EXPECT_THAT(args->GetDims("shape").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "flag --shape: '2,x'"));
  auto absent = args->GetDims("version");
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->empty());
  for (const char* bad : {"", "1,,2", "-1", "3,-2"}) {
    std::vector<std::string> text = {"pull", "--offset", bad};
    std::vector<char*> v;
    for (std::string& s : text) v.push_back(s.data());
    auto parsed = CliArgs::Parse(3, v.data(), {{"offset"}});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(parsed->GetDims("offset").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "flag --offset")) << bad;
  }
}

}  // namespace
}  // namespace client
}  // namespace meshserve
