#include "common/tensor/convert.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/tensor/bfloat16.h"

namespace meshserve {
namespace {

template <typename Int, typename F>
Int SaturatingCast(F x) {
  if (std::isnan(x)) return 0;
  constexpr F kLo = static_cast<F>(std::numeric_limits<Int>::lowest());
  constexpr F kHi = static_cast<F>(std::numeric_limits<Int>::max());
  if (x <= kLo) return std::numeric_limits<Int>::lowest();
  if (x >= kHi) return std::numeric_limits<Int>::max();
  return static_cast<Int>(x);
}

template <typename T>
void WidenTyped(const void* src, int64_t n, float* dst) {
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
}

template <typename T, typename F>
void NarrowTyped(const F* src, int64_t n, void* dst) {
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      d[i] = static_cast<T>(src[i]);
    } else {
      d[i] = SaturatingCast<T>(src[i]);
    }
  }
}

bool IsExactIntLike(DType d) {
  return d == DType::kInt32 || d == DType::kInt64 || d == DType::kFloat64;
}

void FromDouble(const double* src, int64_t n, DType to, void* dst) {
  switch (to) {
    case DType::kInt32: NarrowTyped<int32_t>(src, n, dst); break;
    case DType::kInt64: NarrowTyped<int64_t>(src, n, dst); break;
    default: NarrowTyped<double>(src, n, dst); break;
  }
}

}  // namespace

void WidenToFloat(DType dtype, const void* src, int64_t n, float* dst) {
  if (n <= 0) return;  // an empty tensor's buffer may be null (memcpy needs non-null)
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16:
      BFloat16ToFloat(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kFloat16:
      HalfToFloat(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kFloat64: WidenTyped<double>(src, n, dst); return;
    case DType::kInt32: WidenTyped<int32_t>(src, n, dst); return;
    case DType::kInt64: WidenTyped<int64_t>(src, n, dst); return;
    case DType::kInt8: WidenTyped<int8_t>(src, n, dst); return;
    case DType::kUInt8: WidenTyped<uint8_t>(src, n, dst); return;
    case DType::kBool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i] != 0 ? 1.0f : 0.0f;
      return;
    }
  }
}

void NarrowFromFloat(const float* src, int64_t n, DType dtype, void* dst) {
  if (n <= 0) return;  // as WidenToFloat
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16:
      FloatToBFloat16(src, static_cast<uint16_t*>(dst), n);
      return;
    case DType::kFloat16:
      FloatToHalf(src, static_cast<uint16_t*>(dst), n);
      return;
    case DType::kFloat64: NarrowTyped<double>(src, n, dst); return;
    case DType::kInt32: NarrowTyped<int32_t>(src, n, dst); return;
    case DType::kInt64: NarrowTyped<int64_t>(src, n, dst); return;
    case DType::kInt8: NarrowTyped<int8_t>(src, n, dst); return;
    case DType::kUInt8: NarrowTyped<uint8_t>(src, n, dst); return;
    case DType::kBool: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != 0.0f ? 1 : 0;
      return;
    }
  }
}

void ConvertElements(DType from, const void* src, int64_t n, DType to, void* dst) {
  if (n <= 0) return;  // as WidenToFloat
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n * DTypeSize(from)));
    return;
  }
  constexpr int64_t kChunk = 4096;
  if (IsExactIntLike(from) && IsExactIntLike(to)) {
    double buf[kChunk];
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(dst);
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t m = std::min(kChunk, n - off);
      for (int64_t i = 0; i < m; ++i) {
        const char* p = s + (off + i) * DTypeSize(from);
        if (from == DType::kInt32) {
          int32_t v; std::memcpy(&v, p, 4); buf[i] = v;
        } else if (from == DType::kInt64) {
          int64_t v; std::memcpy(&v, p, 8); buf[i] = static_cast<double>(v);
        } else {
          std::memcpy(&buf[i], p, 8);
        }
      }
      if (from == DType::kInt64 && to == DType::kInt32) {
        // Avoid the double round trip for large int64 values.
        const int64_t* s64 = reinterpret_cast<const int64_t*>(s) + off;
        int32_t* d32 = reinterpret_cast<int32_t*>(d) + off;
        for (int64_t i = 0; i < m; ++i) d32[i] = SaturatingCast<int32_t>(static_cast<double>(s64[i]));
      } else if (from == DType::kInt32 && to == DType::kInt64) {
        const int32_t* s32 = reinterpret_cast<const int32_t*>(s) + off;
        int64_t* d64 = reinterpret_cast<int64_t*>(d) + off;
        for (int64_t i = 0; i < m; ++i) d64[i] = s32[i];
      } else {
        FromDouble(buf, m, to, d + off * DTypeSize(to));
      }
    }
    return;
  }
  float buf[kChunk];
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    WidenToFloat(from, s + off * DTypeSize(from), m, buf);
    NarrowFromFloat(buf, m, to, d + off * DTypeSize(to));
  }
}

}  // namespace meshserve
