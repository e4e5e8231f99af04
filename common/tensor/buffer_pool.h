// Tensor buffer memory: 64-byte-aligned blocks, the big ones recycled in a
// process-wide pool.
//
//   // main, before threads start:
//   BufferPoolOptions pool;
//   MS_ASSIGN_OR_RETURN(pool.cap_bytes, ParseBufferPoolMib(std::getenv("MESHSERVE_TENSOR_POOL_MIB"),
//                                                         "MESHSERVE_TENSOR_POOL_MIB"));
//   pool.tune_malloc = true;
//   MS_RETURN_IF_ERROR(ConfigureBufferPool(pool));
//   // Tensor (tensor.cc):
//   MS_ASSIGN_OR_RETURN(TensorBuffer b, AllocateTensorBuffer(bytes, /*zero=*/true));
//
// Why a pool: on a virtual machine the first touch of fresh memory is the
// dominant cost of moving big shards (measured here: ~1.6 s per 256 MiB fresh,
// ~0.1 s reused), and a push or a scale step frees old versions' buffers of
// the sizes the next one needs. So buffers of kPooledBufferBytes (4 MiB) and
// more are mappings of whole 2 MiB pages (advised onto transparent huge pages)
// that, once freed, are kept and handed out again (best fit by size; adjacent
// free ranges merge; a range bigger than asked for is split). The pool keeps
// at most cap_bytes free; past that the biggest free ranges are unmapped.
// Smaller buffers come from aligned_alloc.
//
// Header format: every buffer starts kTensorBufferHeader (64) bytes after a
// header {magic, length}: magic "ms-pool!" (length = bytes of the mapping,
// header included) for a pooled range, "ms-mallc" for an aligned_alloc block.
// FreeTensorBuffer reads it to give the range back or free() the block.
//
// Malloc tuning (BufferPoolOptions::tune_malloc, the binaries' mains set it):
// M_MMAP_THRESHOLD = 2 * kPooledBufferBytes and M_TRIM_THRESHOLD = 256 MiB, so
// small blocks (gRPC messages, strings of ~1 MiB chunks) stay in malloc's heap
// instead of being mapped and unmapped per use (the same first-touch cost,
// paid per message). It changes malloc for the whole process, which is why
// only a main asks for it.
//
// Thread-safety: thread-safe. ConfigureBufferPool may run at any time (a lower
// cap unmaps the excess at once); mallopt is best called before threads start.
#ifndef MESHSERVE_COMMON_TENSOR_BUFFER_POOL_H_
#define MESHSERVE_COMMON_TENSOR_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// Alignment of every buffer (one cache line; AVX-512 friendly).
inline constexpr size_t kTensorAlignment = 64;
// Buffers of this size and more come from the pool.
inline constexpr size_t kPooledBufferBytes = size_t{4} << 20;
// The pool's cap when nothing configures it.
inline constexpr int64_t kDefaultBufferPoolCapMib = 2048;

struct BufferPoolOptions {
  // Free bytes the pool keeps at most (0: a freed range is unmapped at once).
  int64_t cap_bytes = kDefaultBufferPoolCapMib << 20;
  // mallopt as in the file comment; false leaves malloc's settings as they are.
  bool tune_malloc = false;
};

// Applies `options` to the process-wide pool (see the Thread-safety note).
// \error kInvalidArgument for a negative cap_bytes, naming it.
absl::Status ConfigureBufferPool(const BufferPoolOptions& options);

// A cap given as a whole number of MiB, as MESHSERVE_TENSOR_POOL_MIB or a
// flag writes it: null or "" gives kDefaultBufferPoolCapMib. Returns bytes.
// \error kInvalidArgument naming `source` and the text when it is not a whole
//   number between 0 and 2^30.
absl::StatusOr<int64_t> ParseBufferPoolMib(const char* text, absl::string_view source);

// The cap in force, and the bytes the pool holds free now.
int64_t BufferPoolCapBytes();
int64_t BufferPoolFreeBytes();

// Maps `bytes` (rounded up to 2 MiB) of buffer memory, touches every page and
// leaves it free in the pool, so that the first big tensors a process makes
// do not pay the first touch of fresh memory (a worker that joins a cluster
// calls it before it registers). kInvalidArgument if `bytes` is negative or
// above the pool's cap; kResourceExhausted if the memory cannot be mapped.
absl::Status PrefaultBufferPool(int64_t bytes);

// Releases a buffer from AllocateTensorBuffer (by its header; null is a no-op).
void FreeTensorBuffer(char* p);
struct TensorBufferDeleter {
  void operator()(char* p) const { FreeTensorBuffer(p); }
};
using TensorBuffer = std::unique_ptr<char, TensorBufferDeleter>;

// A buffer of `size` bytes rounded up to kTensorAlignment (at least one
// line, so a zero-size tensor's data is not null), aligned to it. `zero`:
// every byte zero; else only the bytes past `size` are (the caller writes the
// rest). \error kInvalidArgument for a negative size; kResourceExhausted
// naming the size when the memory cannot be had.
absl::StatusOr<TensorBuffer> AllocateTensorBuffer(int64_t size, bool zero);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_BUFFER_POOL_H_
