// A fuzz input as a file, for parsers that read from a path (safetensors,
// the client's .npy reader): an anonymous in-memory file (memfd) named by
// /proc/self/fd/N, so no disk and no temporary-file cleanup.
//
// Thread-safety: one FuzzFile per thread.
#ifndef MESHSERVE_TESTS_FUZZ_FUZZ_FILE_H_
#define MESHSERVE_TESTS_FUZZ_FUZZ_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "absl/strings/string_view.h"

namespace meshserve {
namespace fuzz {

class FuzzFile {
 public:
  explicit FuzzFile(absl::string_view bytes) : fd_(memfd_create("fuzz", 0)) {
    if (fd_ < 0) __builtin_trap();  // the harness cannot run: not an input's fault
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) __builtin_trap();
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~FuzzFile() { close(fd_); }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace fuzz
}  // namespace meshserve

#endif  // MESHSERVE_TESTS_FUZZ_FUZZ_FILE_H_
