#include "common/base/dtype.h"

#include "common/base/status_util.h"

namespace meshserve {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  absl::string_view short_name;
  absl::string_view wire_name;
  absl::string_view safetensors_name;
  int64_t size;
};

constexpr DTypeInfo kInfos[] = {
    {DType::kFloat32, "float32", "f32", "FP32", "F32", 4},
    {DType::kBFloat16, "bfloat16", "bf16", "BF16", "BF16", 2},
    {DType::kFloat16, "float16", "f16", "FP16", "F16", 2},
    {DType::kFloat64, "float64", "f64", "FP64", "F64", 8},
    {DType::kInt32, "int32", "i32", "INT32", "I32", 4},
    {DType::kInt64, "int64", "i64", "INT64", "I64", 8},
    {DType::kInt8, "int8", "i8", "INT8", "I8", 1},
    {DType::kUInt8, "uint8", "u8", "UINT8", "U8", 1},
    {DType::kBool, "bool", "bool", "BOOL", "BOOL", 1},
};

const DTypeInfo& Info(DType dtype) {
  for (const DTypeInfo& info : kInfos) {
    if (info.dtype == dtype) return info;
  }
  return kInfos[0];  // unreachable: every enumerator has a row.
}

}  // namespace

absl::string_view DTypeName(DType dtype) { return Info(dtype).name; }
absl::string_view DTypeShortName(DType dtype) { return Info(dtype).short_name; }
absl::string_view DTypeWireName(DType dtype) { return Info(dtype).wire_name; }
int64_t DTypeSize(DType dtype) { return Info(dtype).size; }

absl::StatusOr<DType> ParseDType(absl::string_view text) {
  for (const DTypeInfo& info : kInfos) {
    if (text == info.name || text == info.short_name || text == info.wire_name ||
        text == info.safetensors_name) {
      return info.dtype;
    }
  }
  return InvalidArgument("unknown dtype '", text,
                         "' (expected float32, bfloat16, float16, float64, "
                         "int32, int64, int8, uint8 or bool)");
}

}  // namespace meshserve
