// Reading a whole file, in one place: every reader of a model file, a
// checkpoint index, an .npy file, a PEM or token file or a CLI request file
// calls ReadFileToString and adds its own context to the error.
//
//   ReadFileToString(path)  the bytes of the file at `path`
//     open or read fails    NotFound "cannot read '<path>': <strerror(errno)>"
//                           (a missing file, no permission, a directory)
//   PreadFully(fd, dst, size, offset)
//                           exactly `size` bytes at `offset` (pread: no shared
//                           file offset, so concurrent calls on one fd are safe)
//     a read fails          DataLoss "read of <size> bytes at offset <offset>
//                           failed: <strerror(errno)>"
//     the file ends first   DataLoss "file ends before offset <end> (truncated?)"
//                           (callers prefix the file: "safetensors '<path>': ")
//   DirOf(path)             the folder files named inside `path` are relative
//                           to: "a/b/m.json" -> "a/b", "/m.json" -> "/",
//                           "m.json" -> "." (os.path.dirname, but "." where
//                           it gives "")
//
// The size is taken from fstat first, so a large file (an .npy of a few GiB)
// is read into one allocation of the right size; a file that grows or shrinks
// while it is read is read to its end all the same.
//
// Thread-safety: thread-safe (no shared state).
#ifndef MESHSERVE_COMMON_BASE_FILE_IO_H_
#define MESHSERVE_COMMON_BASE_FILE_IO_H_

#include <cstdint>
#include <string>

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// A file descriptor (or socket) closed when it goes out of scope; -1 holds
// nothing.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<std::string> ReadFileToString(absl::string_view path);

absl::Status PreadFully(int fd, char* dst, int64_t size, int64_t offset);

std::string DirOf(absl::string_view path);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_FILE_IO_H_
