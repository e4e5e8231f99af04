// Raw element conversions between any DType and float32 (used by the kernels,
// copy_box's accumulate, safetensors and npy).
//
// To float32: bfloat16/float16 exactly, float64 rounded, integers as
// static_cast<float>, bool 0/1. From float32: bfloat16/float16 round to
// nearest even, integers round toward zero (static_cast; values outside the
// type's range are saturated, NaN gives 0), bool is x != 0.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_CONVERT_H_
#define MESHSERVE_COMMON_TENSOR_CONVERT_H_

#include <cstdint>

#include "common/base/dtype.h"

namespace meshserve {

// dst[i] = float(src[i]) for i < n; src holds n elements of `dtype`.
void WidenToFloat(DType dtype, const void* src, int64_t n, float* dst);
// dst[i] = dtype(src[i]) for i < n.
void NarrowFromFloat(const float* src, int64_t n, DType dtype, void* dst);
// Any dtype to any dtype (through float32, except identical dtypes, which
// are memcpy'd, and int32/int64/float64 between each other, which are exact
// where the value fits).
void ConvertElements(DType from, const void* src, int64_t n, DType to, void* dst);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_CONVERT_H_
