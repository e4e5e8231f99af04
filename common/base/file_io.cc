#include "common/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

absl::Status ReadError(absl::string_view path, int error) {
  return NotFound("cannot read '", path, "': ", std::strerror(error));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(absl::string_view path) {
  const std::string name(path);
  Fd fd(open(name.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ReadError(path, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ReadError(path, errno);
  if (S_ISDIR(st.st_mode)) return ReadError(path, EISDIR);
  std::string out;
  // st_size is 0 for pipes and /proc files: then grow as we read.
  out.resize(st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 4096);
  size_t size = 0;
  while (true) {
    if (size == out.size()) out.resize(out.size() * 2);
    const ssize_t n = read(fd.get(), out.data() + size, out.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ReadError(path, errno);
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  out.resize(size);
  return out;
}

absl::Status PreadFully(int fd, char* dst, int64_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t n = pread(fd, dst, static_cast<size_t>(size), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("read of ", size, " bytes at offset ", offset,
                                              " failed: ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("file ends before offset ", offset + size, " (truncated?)"));
    }
    dst += n;
    size -= n;
    offset += n;
  }
  return absl::OkStatus();
}

std::string DirOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  return std::string(path.substr(0, slash == 0 ? 1 : slash));
}

}  // namespace meshserve
