// The byte-level helpers of _meshserve_native (native_params.cc): a NumPy
// view's memory as the row-major bytes of its box (StridedBytes), protobuf
// varint encoding, a forward reader over a received message's gRPC slices,
// and zero-copy slices over a view's memory (SliceViews).
//
// StridedBytes: byte p of the box is run r = p / run_bytes, byte
// p % run_bytes of that run, where a run is the longest contiguous tail of
// dims (run_bytes = itemsize * prod(shape[k:]); strides[i] == shape[i+1] *
// strides[i+1] for i >= k, dims of size 1 taken in) and run r's address is
// base + sum over i < k of index_i(r) * strides[i] (r unravelled over
// shape[:k], row-major, as NumPy's np.unravel_index).
//
// Thread-safety: StridedBytes and SliceReader are used by one thread at a
// time; SliceViews' count is guarded by its mutex (gRPC drops slices on its
// own threads).
#ifndef MESHSERVE_CLIENT_PYTHON_NATIVE_NATIVE_WIRE_H_
#define MESHSERVE_CLIENT_PYTHON_NATIVE_NATIVE_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace meshserve::pynative {

// A buffer's memory as the row-major bytes of its shape (see the top).
struct StridedBytes {
  char* base = nullptr;
  std::vector<int64_t> outer_shape, outer_strides;  // dims [0, k)
  int64_t run_bytes = 0;
  int64_t total_bytes = 0;

  // From a buffer's pointer, item size, shape and strides (bytes).
  static StridedBytes Of(void* ptr, int64_t itemsize, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides);
  char* RunAddress(int64_t run) const;
  // Copies bytes [pos, pos + n) of the box to `out` (gather) or from `in`
  // (scatter), whichever is non-null.
  void Copy(int64_t pos, int64_t n, char* out, const char* in) const;
};

// Zero-copy slices over buffers' memory: each slice made here is counted
// until gRPC drops it; Wait() returns once every one is dropped (the memory
// may be freed then).
class SliceViews {
 public:
  // Appends slices of bytes [pos, pos + n) of `b` (one per run) to `out`.
  void Append(const StridedBytes& b, int64_t pos, int64_t n, std::vector<grpc::Slice>* out);
  void Wait();

 private:
  static void Release(void* self);
  std::mutex mu_;
  std::condition_variable dropped_;
  int64_t live_ = 0;
};

void PutVarint(std::string* out, uint64_t v);
void PutInt(std::string* out, int field, int64_t v);  // a varint field
void PutBytes(std::string* out, int field, const std::string& bytes);

// A received message's bytes over gRPC's slices, read forward.
class SliceReader {
 public:
  explicit SliceReader(const grpc::ByteBuffer& buffer) { (void)buffer.Dump(&slices_); }

  bool Done() {
    Settle();
    return slice_ == slices_.size();
  }
  bool Varint(uint64_t* v);
  // Passes the next n bytes to fn(const char*, size) piecewise; false if short.
  template <typename Fn>
  bool Take(uint64_t n, Fn fn) {
    while (n > 0) {
      Settle();
      if (slice_ == slices_.size()) return false;
      uint64_t take = std::min<uint64_t>(n, slices_[slice_].size() - at_);
      fn(reinterpret_cast<const char*>(slices_[slice_].begin()) + at_, take);
      at_ += take;
      n -= take;
    }
    return true;
  }

 private:
  void Settle() {
    while (slice_ < slices_.size() && at_ == slices_[slice_].size()) {
      ++slice_;
      at_ = 0;
    }
  }
  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t at_ = 0;
};

}  // namespace meshserve::pynative

#endif  // MESHSERVE_CLIENT_PYTHON_NATIVE_NATIVE_WIRE_H_
