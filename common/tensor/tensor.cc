#include "common/tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include <malloc.h>
#include <sys/mman.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"

namespace meshserve {

absl::StatusOr<int64_t> NumElementsOfShape(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("shape ", ShapeToString(shape), " has a negative dim");
    if (!CheckedMul(n, d, &n)) {
      return InvalidArgument("shape ", ShapeToString(shape), " has too many elements");
    }
  }
  return n;
}

std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

namespace {

// Buffer allocation. Every buffer starts kHeader bytes after a header saying
// where it came from. Buffers of kPooledBytes and more are mappings of whole
// 2 MiB pages (advised onto transparent huge pages) that are kept, once
// freed, in a process-wide pool and handed out again: on a virtual machine
// the first touch of fresh memory is the dominant cost of moving big shards
// (measured here: ~1.6 s per 256 MiB fresh, ~0.1 s reused), and a push or a
// scale step frees old versions' buffers of the sizes the next one needs.
// The pool keeps at most MESHSERVE_TENSOR_POOL_MIB (default 2048) MiB free;
// past that the biggest free ranges are unmapped.
constexpr size_t kHeader = kTensorAlignment;
constexpr size_t kPageBytes = size_t{2} << 20;
constexpr size_t kPooledBytes = size_t{4} << 20;
constexpr uint64_t kMallocMagic = 0x6d732d6d616c6c63;  // "ms-mallc"
constexpr uint64_t kPoolMagic = 0x6d732d706f6f6c21;    // "ms-pool!"

struct BufferHeader {
  uint64_t magic;
  uint64_t length;  // pool: bytes of the range, header included
};
static_assert(sizeof(BufferHeader) <= kHeader, "header fits");

absl::StatusOr<size_t> ParsePoolCap() {
  const char* env = std::getenv("MESHSERVE_TENSOR_POOL_MIB");
  if (env == nullptr || *env == '\0') return size_t{2048} << 20;
  int64_t mib = 0;
  if (!absl::SimpleAtoi(env, &mib) || mib < 0 || mib > (int64_t{1} << 30)) {
    return InvalidArgument("MESHSERVE_TENSOR_POOL_MIB='", env,
                           "' is not a whole number of MiB between 0 and 2^30");
  }
  return static_cast<size_t>(mib) << 20;
}

// Bad values are reported by TensorPoolCapBytes() (workers check it at
// start); here, where no caller can be told, they keep the default.
size_t PoolCapBytes() {
  absl::StatusOr<size_t> cap = ParsePoolCap();
  return cap.ok() ? *cap : size_t{2048} << 20;
}

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
  size_t cap() const { return cap_; }
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
      while (free_bytes_ > cap_ && !by_size_.empty()) {
        auto biggest = std::prev(by_size_.end());
        drop.emplace_back(biggest->second, biggest->first);
        Erase(biggest->second, biggest->first);
      }
    }
    for (const auto& [p, n] : drop) munmap(p, n);
  }

 private:
  BufferPool() : cap_(PoolCapBytes()) {}
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

  const size_t cap_;
  absl::Mutex mu_;
  std::map<char*, size_t> by_addr_ ABSL_GUARDED_BY(mu_);
  std::multimap<size_t, char*> by_size_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Small blocks (gRPC messages, strings of ~1 MiB chunks) stay in malloc's
// heap instead of being mapped and unmapped per use: the same first-touch
// cost as above, paid per message.
const bool kMallocTuned = [] {
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPooledBytes * 2));
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
}();

}  // namespace

absl::StatusOr<int64_t> TensorPoolCapBytes() {
  MS_ASSIGN_OR_RETURN(size_t cap, ParsePoolCap());
  return static_cast<int64_t>(cap);
}

absl::Status PrefaultTensorPool(int64_t bytes) {
  BufferPool& pool = BufferPool::Get();
  if (bytes < 0 || static_cast<uint64_t>(bytes) > pool.cap()) {
    return InvalidArgument("cannot prefault ", bytes, " bytes: the tensor pool keeps at most ",
                           pool.cap(), " (MESHSERVE_TENSOR_POOL_MIB)");
  }
  if (bytes == 0) return absl::OkStatus();
  const size_t length = (static_cast<size_t>(bytes) + kPageBytes - 1) / kPageBytes * kPageBytes;
  bool fresh = false;
  char* base = pool.Take(length, &fresh);
  if (base == nullptr) return ResourceExhausted("cannot map ", length, " bytes to prefault");
  for (size_t i = 0; i < length; i += 4096) base[i] = 0;  // zero already: a write faults it in
  pool.Give(base, length);
  return absl::OkStatus();
}

void Tensor::FreeDeleter::operator()(char* p) const {
  auto* header = reinterpret_cast<BufferHeader*>(p - kHeader);
  if (header->magic == kPoolMagic) {
    header->magic = 0;
    BufferPool::Get().Give(reinterpret_cast<char*>(header), header->length);
  } else {
    std::free(header);
  }
}

bool Tensor::TryAllocate(bool zero) {
  (void)kMallocTuned;
  // At least one line so data() is never null for a zero-size tensor.
  const int64_t lines = CeilOfRatio(std::max<int64_t>(num_bytes_, 1), kTensorAlignment);
  if (lines > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(kTensorAlignment) - 1) {
    return false;
  }
  const size_t size = static_cast<size_t>(lines) * kTensorAlignment;
  char* p = nullptr;
  bool fresh = false;
  if (size >= kPooledBytes && size <= std::numeric_limits<size_t>::max() / 2) {
    const size_t length = (size + kHeader + kPageBytes - 1) / kPageBytes * kPageBytes;
    char* base = BufferPool::Get().Take(length, &fresh);
    if (base == nullptr) return false;
    *reinterpret_cast<BufferHeader*>(base) = BufferHeader{kPoolMagic, length};
    p = base + kHeader;
  } else {
    char* base = static_cast<char*>(std::aligned_alloc(kTensorAlignment, size + kHeader));
    if (base == nullptr) return false;
    *reinterpret_cast<BufferHeader*>(base) = BufferHeader{kMallocMagic, 0};
    p = base + kHeader;
  }
  if (zero) {
    if (!fresh) std::memset(p, 0, size);
  } else if (size > static_cast<size_t>(num_bytes_)) {
    std::memset(p + num_bytes_, 0, size - static_cast<size_t>(num_bytes_));  // padding only
  }
  buffer_.reset(p);
  return true;
}

void Tensor::Allocate(bool zero) {
  if (!TryAllocate(zero)) throw std::bad_alloc();
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_) {
  if (other.buffer_ != nullptr) {
    Allocate(/*zero=*/false);
    std::memcpy(buffer_.get(), other.buffer_.get(), static_cast<size_t>(num_bytes_));
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_),
      buffer_(std::move(other.buffer_)) {
  other.dtype_ = DType::kFloat32;
  other.shape_.clear();
  other.num_elements_ = 1;
  other.num_bytes_ = 0;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    num_elements_ = other.num_elements_;
    num_bytes_ = other.num_bytes_;
    buffer_ = std::move(other.buffer_);
    other.dtype_ = DType::kFloat32;
    other.shape_.clear();
    other.num_elements_ = 1;
    other.num_bytes_ = 0;
  }
  return *this;
}

absl::StatusOr<Tensor> Tensor::CreateUninitialized(DType dtype,
                                                   absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(shape));
  int64_t bytes;
  if (!CheckedMul(n, DTypeSize(dtype), &bytes)) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape),
                           " is too large");
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = n;
  t.num_bytes_ = bytes;
  if (!t.TryAllocate(/*zero=*/false)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes for tensor ",
                                                     DTypeShortName(dtype), ShapeToString(shape)));
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Create(DType dtype, absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, shape));
  std::memset(t.buffer_.get(), 0, static_cast<size_t>(t.num_bytes_));
  return t;
}

Tensor Tensor::Zeros(DType dtype, absl::Span<const int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = 1;
  for (int64_t d : shape) {
    MS_DCHECK(d >= 0);  // validated by callers (Create)
    t.num_elements_ *= d;
  }
  t.num_bytes_ = t.num_elements_ * DTypeSize(dtype);
  t.Allocate();
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view bytes) {
  MS_ASSIGN_OR_RETURN(Tensor t, CreateUninitialized(dtype, shape));
  if (static_cast<int64_t>(bytes.size()) != t.num_bytes_) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape),
                           " needs ", t.num_bytes_, " bytes, got ", bytes.size());
  }
  if (!bytes.empty()) std::memcpy(t.buffer_.get(), bytes.data(), bytes.size());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromValues(DType dtype, absl::Span<const int64_t> shape,
                                          absl::Span<const float> values) {
  MS_ASSIGN_OR_RETURN(Tensor t, Create(dtype, shape));
  if (static_cast<int64_t>(values.size()) != t.num_elements_) {
    return InvalidArgument("tensor ", DTypeShortName(dtype), ShapeToString(shape), " has ",
                           t.num_elements_, " elements, got ", values.size(), " values");
  }
  NarrowFromFloat(values.data(), t.num_elements_, dtype, t.buffer_.get());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromInt32(absl::Span<const int64_t> shape,
                                         absl::Span<const int32_t> values) {
  return FromBytes(DType::kInt32, shape,
                   absl::string_view(reinterpret_cast<const char*>(values.data()),
                                     values.size() * sizeof(int32_t)));
}

absl::Status Tensor::SetShape(absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(shape));
  if (n != num_elements_) {
    return InvalidArgument("cannot reshape ", ToString(), " (", num_elements_,
                           " elements) to ", ShapeToString(shape), " (", n, " elements)");
  }
  shape_.assign(shape.begin(), shape.end());
  return absl::OkStatus();
}

float Tensor::GetFloat(int64_t i) const {
  MS_DCHECK(i >= 0 && i < num_elements_);
  float f;
  WidenToFloat(dtype_, buffer_.get() + i * DTypeSize(dtype_), 1, &f);
  return f;
}

std::vector<float> Tensor::ToFloatVector() const {
  std::vector<float> out(static_cast<size_t>(buffer_ ? num_elements_ : 0));
  if (!out.empty()) WidenToFloat(dtype_, buffer_.get(), num_elements_, out.data());
  return out;
}

std::string Tensor::ToString() const {
  return absl::StrCat(DTypeShortName(dtype_), ShapeToString(shape_));
}

bool operator==(const Tensor& a, const Tensor& b) {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.bytes() == b.bytes();
}

absl::StatusOr<Tensor> ConvertDType(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(to, x.shape()));
  ConvertElements(x.dtype(), x.raw_data(), x.NumElements(), to, out.raw_data());
  return out;
}

absl::StatusOr<BoxTensor> BoxTensor::Create(DType dtype, const Box& box) {
  for (const Interval& iv : box.dims()) {
    if (iv.end < iv.begin) return InvalidArgument("box ", box.ToString(), " has end < begin");
  }
  MS_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(dtype, box.shape()));
  return BoxTensor{box, std::move(t)};
}

absl::StatusOr<BoxTensor> BoxTensor::Wrap(Box box, Tensor tensor) {
  if (tensor.shape() != box.shape()) {
    return InvalidArgument("tensor ", tensor.ToString(), " does not have the shape of box ",
                           box.ToString());
  }
  return BoxTensor{std::move(box), std::move(tensor)};
}

std::string BoxTensor::ToString() const {
  return absl::StrCat(tensor.ToString(), " @ ", box.ToString());
}

}  // namespace meshserve
