// The tensor buffer pool and allocator (see buffer_pool.h for the design, the
// header format and the malloc tuning).
//
// Thread-safety: the pool's maps, free byte count and cap are guarded by one
// mutex; mmap/munmap of dropped ranges run outside it.
#include "common/tensor/buffer_pool.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

constexpr size_t kHeader = kTensorAlignment;
constexpr size_t kPageBytes = size_t{2} << 20;
constexpr uint64_t kMallocMagic = 0x6d732d6d616c6c63;  // "ms-mallc"
constexpr uint64_t kPoolMagic = 0x6d732d706f6f6c21;    // "ms-pool!"

struct BufferHeader {
  uint64_t magic;
  uint64_t length;  // pool: bytes of the range, header included
};
static_assert(sizeof(BufferHeader) <= kHeader, "header fits");

size_t RoundUpToPages(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

class BufferPool {
 public:
  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool();  // never destroyed: buffers outlive statics
    return *pool;
  }

  // A range of `length` bytes (a multiple of kPageBytes), or nullptr.
  // *fresh: newly mapped (zero-filled by the kernel).
  char* Take(size_t length, bool* fresh) {
    {
      absl::MutexLock lock(&mu_);
      auto it = by_size_.lower_bound(length);
      if (it != by_size_.end()) {
        char* base = it->second;
        const size_t have = it->first;
        Erase(base, have);
        if (have > length) Insert(base + length, have - length);
        *fresh = false;
        return base;
      }
    }
    *fresh = true;
    return MapAligned(length);
  }

  // Takes back a range from Take (merged with its free neighbours).
  void Give(char* base, size_t length) {
    std::vector<std::pair<char*, size_t>> drop;
    {
      absl::MutexLock lock(&mu_);
      auto next = by_addr_.lower_bound(base);
      if (next != by_addr_.end() && next->first == base + length) {
        const size_t n = next->second;
        Erase(next->first, n);
        length += n;
      }
      auto prev = by_addr_.lower_bound(base);
      if (prev != by_addr_.begin()) {
        --prev;
        if (prev->first + prev->second == base) {
          char* p = prev->first;
          const size_t n = prev->second;
          Erase(p, n);
          base = p;
          length += n;
        }
      }
      Insert(base, length);
      drop = TrimToCap();
    }
    for (const auto& [p, n] : drop) munmap(p, n);
  }

  size_t cap() {
    absl::MutexLock lock(&mu_);
    return cap_;
  }
  size_t free_bytes() {
    absl::MutexLock lock(&mu_);
    return free_bytes_;
  }

  void SetCap(size_t cap) {
    std::vector<std::pair<char*, size_t>> drop;
    {
      absl::MutexLock lock(&mu_);
      cap_ = cap;
      drop = TrimToCap();
    }
    for (const auto& [p, n] : drop) munmap(p, n);
  }

 private:
  BufferPool() = default;

  // `length` bytes mapped at a kPageBytes boundary and advised onto huge pages.
  static char* MapAligned(size_t length) {
    void* raw = mmap(nullptr, length + kPageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    char* p = static_cast<char*>(raw);
    char* base = reinterpret_cast<char*>(
        (reinterpret_cast<uintptr_t>(p) + kPageBytes - 1) & ~(uintptr_t{kPageBytes} - 1));
    if (base > p) munmap(p, static_cast<size_t>(base - p));
    char* tail = base + length;
    const size_t tail_bytes = static_cast<size_t>(p + length + kPageBytes - tail);
    if (tail_bytes > 0) munmap(tail, tail_bytes);
    madvise(base, length, MADV_HUGEPAGE);  // advice only: errors ignored
    return base;
  }

  // Removes the biggest free ranges until at most cap_ bytes are free; the
  // caller unmaps them outside the lock.
  std::vector<std::pair<char*, size_t>> TrimToCap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<char*, size_t>> drop;
    while (free_bytes_ > cap_ && !by_size_.empty()) {
      auto biggest = std::prev(by_size_.end());
      drop.emplace_back(biggest->second, biggest->first);
      Erase(biggest->second, biggest->first);
    }
    return drop;
  }
  void Insert(char* base, size_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    by_addr_.emplace(base, length);
    by_size_.emplace(length, base);
    free_bytes_ += length;
  }
  void Erase(char* base, size_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    by_addr_.erase(base);
    auto range = by_size_.equal_range(length);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == base) {
        by_size_.erase(it);
        break;
      }
    }
    free_bytes_ -= length;
  }

  absl::Mutex mu_;
  size_t cap_ ABSL_GUARDED_BY(mu_) = static_cast<size_t>(kDefaultBufferPoolCapMib) << 20;
  std::map<char*, size_t> by_addr_ ABSL_GUARDED_BY(mu_);
  std::multimap<size_t, char*> by_size_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::Status ConfigureBufferPool(const BufferPoolOptions& options) {
  if (options.cap_bytes < 0) {
    return InvalidArgument("buffer pool cap_bytes=", options.cap_bytes, " is negative");
  }
  if (options.tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPooledBufferBytes * 2));
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
  BufferPool::Get().SetCap(static_cast<size_t>(options.cap_bytes));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseBufferPoolMib(const char* text, absl::string_view source) {
  if (text == nullptr || *text == '\0') return kDefaultBufferPoolCapMib << 20;
  int64_t mib = 0;
  if (!absl::SimpleAtoi(text, &mib) || mib < 0 || mib > (int64_t{1} << 30)) {
    return InvalidArgument(source, "='", text, "' is not a whole number of MiB between 0 and 2^30");
  }
  return mib << 20;
}

int64_t BufferPoolCapBytes() { return static_cast<int64_t>(BufferPool::Get().cap()); }

int64_t BufferPoolFreeBytes() { return static_cast<int64_t>(BufferPool::Get().free_bytes()); }

absl::Status PrefaultBufferPool(int64_t bytes) {
  BufferPool& pool = BufferPool::Get();
  const size_t cap = pool.cap();
  if (bytes < 0 || static_cast<uint64_t>(bytes) > cap) {
    return InvalidArgument("cannot prefault ", bytes, " bytes: the tensor pool keeps at most ",
                           cap, " bytes free");
  }
  if (bytes == 0) return absl::OkStatus();
  const size_t length = RoundUpToPages(static_cast<size_t>(bytes));
  bool fresh = false;
  char* base = pool.Take(length, &fresh);
  if (base == nullptr) return ResourceExhausted("cannot map ", length, " bytes to prefault");
  for (size_t i = 0; i < length; i += 4096) base[i] = 0;  // zero already: a write faults it in
  pool.Give(base, length);
  return absl::OkStatus();
}

void FreeTensorBuffer(char* p) {
  if (p == nullptr) return;
  auto* header = reinterpret_cast<BufferHeader*>(p - kHeader);
  if (header->magic == kPoolMagic) {
    header->magic = 0;
    BufferPool::Get().Give(reinterpret_cast<char*>(header), header->length);
  } else {
    std::free(header);
  }
}

absl::StatusOr<TensorBuffer> AllocateTensorBuffer(int64_t size, bool zero) {
  constexpr int64_t kLine = static_cast<int64_t>(kTensorAlignment);
  if (size < 0) return InvalidArgument("cannot allocate a buffer of ", size, " bytes");
  const int64_t lines = (std::max<int64_t>(size, 1) - 1) / kLine + 1;  // rounded up
  if (lines > std::numeric_limits<int64_t>::max() / kLine - 1) {
    return ResourceExhausted("cannot allocate a buffer of ", size, " bytes");
  }
  const size_t rounded = static_cast<size_t>(lines) * kTensorAlignment;
  char* base = nullptr;
  bool fresh = false;
  if (rounded >= kPooledBufferBytes && rounded <= std::numeric_limits<size_t>::max() / 2) {
    const size_t length = RoundUpToPages(rounded + kHeader);
    base = BufferPool::Get().Take(length, &fresh);
    if (base != nullptr) *reinterpret_cast<BufferHeader*>(base) = BufferHeader{kPoolMagic, length};
  } else {
    base = static_cast<char*>(std::aligned_alloc(kTensorAlignment, rounded + kHeader));
    if (base != nullptr) *reinterpret_cast<BufferHeader*>(base) = BufferHeader{kMallocMagic, 0};
  }
  if (base == nullptr) return ResourceExhausted("cannot allocate a buffer of ", size, " bytes");
  char* p = base + kHeader;
  if (zero) {
    if (!fresh) std::memset(p, 0, rounded);
  } else if (rounded > static_cast<size_t>(size)) {
    std::memset(p + size, 0, rounded - static_cast<size_t>(size));  // padding only
  }
  return TensorBuffer(p);
}

}  // namespace meshserve
