#include "common/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

std::string TempPath(const std::string& name) {
  return std::string(::testing::TempDir()) + "/file_io_test_" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

TEST(FileIoTest, ReadsEveryByteIncludingNul) {
  const std::string path = TempPath("small");
  const std::string bytes("a\0b\nc\r\n\xff", 8);
  WriteBytes(path, bytes);
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(bytes));
}

TEST(FileIoTest, ReadsALargeFileWhole) {
  const std::string path = TempPath("large");
  std::mt19937 rng(7);
  std::string bytes(3 * 1024 * 1024 + 17, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteBytes(path, bytes);
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), bytes.size());
  EXPECT_TRUE(*read == bytes);
}

TEST(FileIoTest, EmptyFileIsEmptyString) {
  const std::string path = TempPath("empty");
  WriteBytes(path, "");
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(""));
}

// /proc files report size 0 but have content: the reader must not trust it.
TEST(FileIoTest, ReadsAFileWhoseSizeIsUnknown) {
  absl::StatusOr<std::string> status = ReadFileToString("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("Name:"), std::string::npos) << *status;
}

TEST(FileIoTest, MissingFileIsNotFoundNamingPathAndReason) {
  const std::string path = TempPath("does_not_exist");
  EXPECT_THAT(ReadFileToString(path),
              StatusIs(absl::StatusCode::kNotFound,
                       "cannot read '" + path + "': No such file or directory"));
}

TEST(FileIoTest, DirectoryIsNotFoundSayingItIsADirectory) {
  const std::string path = TempPath("dir");
  mkdir(path.c_str(), 0755);
  EXPECT_THAT(ReadFileToString(path),
              StatusIs(absl::StatusCode::kNotFound, "'" + path + "': Is a directory"));
}

TEST(FileIoTest, PreadFullyReadsExactlyTheRange) {
  const std::string path = TempPath("pread");
  WriteBytes(path, "0123456789");
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(4, '\0');
  EXPECT_TRUE(PreadFully(fd, got.data(), 4, 3).ok());
  EXPECT_EQ(got, "3456");
  EXPECT_TRUE(PreadFully(fd, got.data(), 0, 10).ok());  // nothing at the end
  EXPECT_THAT(PreadFully(fd, got.data(), 4, 8),
              StatusIs(absl::StatusCode::kDataLoss, "file ends before offset 12 (truncated?)"));
  close(fd);
  EXPECT_THAT(PreadFully(-1, got.data(), 4, 0),
              StatusIs(absl::StatusCode::kDataLoss,
                       "read of 4 bytes at offset 0 failed: Bad file descriptor"));
}

// Against Python's os.path.dirname, except that a bare name gives ".".
TEST(FileIoTest, DirOfIsTheFolderBeforeTheLastSlash) {
  EXPECT_EQ(DirOf("a/b/m.json"), "a/b");
  EXPECT_EQ(DirOf("/models/m.json"), "/models");
  EXPECT_EQ(DirOf("/m.json"), "/");
  EXPECT_EQ(DirOf("m.json"), ".");
  EXPECT_EQ(DirOf("./m.json"), ".");
  EXPECT_EQ(DirOf("a/"), "a");
}

}  // namespace
}  // namespace meshserve
