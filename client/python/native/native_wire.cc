// See native_wire.h: a view's memory as a box's row-major bytes, varints,
// received-slice reading, zero-copy slices.
//
// Thread-safety: see native_wire.h.
#include "native_wire.h"

#include <grpc/slice.h>

#include <cstring>

namespace meshserve::pynative {

StridedBytes StridedBytes::Of(void* ptr, int64_t itemsize, const std::vector<int64_t>& shape,
                              const std::vector<int64_t>& strides) {
  StridedBytes b;
  b.base = static_cast<char*>(ptr);
  int k = static_cast<int>(shape.size());
  int64_t run = itemsize;
  while (k > 0 && (shape[k - 1] == 1 || strides[k - 1] == run)) {
    run *= shape[k - 1];
    --k;
  }
  b.run_bytes = run;
  b.total_bytes = run;
  for (int i = 0; i < k; ++i) {
    b.outer_shape.push_back(shape[i]);
    b.outer_strides.push_back(strides[i]);
    b.total_bytes *= shape[i];
  }
  return b;
}

char* StridedBytes::RunAddress(int64_t run) const {
  char* address = base;
  for (int i = static_cast<int>(outer_shape.size()) - 1; i >= 0; --i) {
    address += (run % outer_shape[i]) * outer_strides[i];
    run /= outer_shape[i];
  }
  return address;
}

void StridedBytes::Copy(int64_t pos, int64_t n, char* out, const char* in) const {
  while (n > 0) {
    int64_t in_run = pos % run_bytes;
    int64_t take = std::min(n, run_bytes - in_run);
    char* address = RunAddress(pos / run_bytes) + in_run;
    if (out != nullptr) {
      std::memcpy(out, address, take);
      out += take;
    } else {
      std::memcpy(address, in, take);
      in += take;
    }
    pos += take;
    n -= take;
  }
}

void SliceViews::Append(const StridedBytes& b, int64_t pos, int64_t n,
                        std::vector<grpc::Slice>* out) {
  while (n > 0) {
    int64_t in_run = pos % b.run_bytes;
    int64_t take = std::min(n, b.run_bytes - in_run);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++live_;
    }
    grpc_slice view = grpc_slice_new_with_user_data(b.RunAddress(pos / b.run_bytes) + in_run,
                                                    static_cast<size_t>(take), &Release, this);
    out->emplace_back(view, grpc::Slice::STEAL_REF);
    pos += take;
    n -= take;
  }
}

void SliceViews::Release(void* self) {
  auto* views = static_cast<SliceViews*>(self);
  std::lock_guard<std::mutex> lock(views->mu_);
  if (--views->live_ == 0) views->dropped_.notify_all();
}

void SliceViews::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  dropped_.wait(lock, [this] { return live_ == 0; });
}

void PutVarint(std::string* out, uint64_t v) {
  while (v > 0x7F) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutInt(std::string* out, int field, int64_t v) {
  PutVarint(out, static_cast<uint64_t>(field) << 3);
  PutVarint(out, static_cast<uint64_t>(v));
}

void PutBytes(std::string* out, int field, const std::string& bytes) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

bool SliceReader::Varint(uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    Settle();
    if (slice_ == slices_.size()) return false;
    uint8_t byte = slices_[slice_].begin()[at_++];
    *v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return true;
  }
  return false;
}

}  // namespace meshserve::pynative
