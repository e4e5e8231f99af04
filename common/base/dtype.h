// Element types shared by the sharding math (type strings, byte counts) and the
// tensor runtime. Names follow numpy/JAX (`float32`), short names follow JAX's
// error messages (`f32`), wire names follow the Open Inference Protocol (`FP32`).
#ifndef MESHSERVE_COMMON_BASE_DTYPE_H_
#define MESHSERVE_COMMON_BASE_DTYPE_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

enum class DType { kFloat32, kBFloat16, kFloat16, kFloat64, kInt32, kInt64, kInt8, kUInt8, kBool };

// "float32", "bfloat16", "int32", ...
absl::string_view DTypeName(DType dtype);
// "f32", "bf16", "i32", ... (JAX's short_dtypes).
absl::string_view DTypeShortName(DType dtype);
// "FP32", "BF16", "INT32", ... (KServe v2 datatype strings).
absl::string_view DTypeWireName(DType dtype);
// Size of one element in bytes.
int64_t DTypeSize(DType dtype);

// Accepts the full name, the short name, the KServe wire name, or the
// safetensors name ("F32", "BF16", "I32"); case-sensitive.
// \error kInvalidArgument naming `text` when it is none of those.
absl::StatusOr<DType> ParseDType(absl::string_view text);

inline std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << DTypeName(dtype);
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_DTYPE_H_
