#include "common/program/ir_conv.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

std::string BoxIrToString(const BoxIr& box) {
  std::vector<std::string> dims;
  const size_t n = std::max(box.begin.size(), box.end.size());
  for (size_t i = 0; i < n; ++i) {
    dims.push_back(absl::StrCat(i < box.begin.size() ? absl::StrCat(box.begin[i]) : "?",
                                ":", i < box.end.size() ? absl::StrCat(box.end[i]) : "?"));
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<Box> BoxFromIr(const BoxIr& box) {
  if (box.begin.size() != box.end.size()) {
    return InvalidArgument("box ", BoxIrToString(box), ": ", box.begin.size(),
                           " begins but ", box.end.size(), " ends");
  }
  std::vector<Interval> dims(box.begin.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (box.begin[i] < 0 || box.end[i] < box.begin[i]) {
      return InvalidArgument("box ", BoxIrToString(box), ": dim ", i,
                             " is not a valid half-open interval");
    }
    dims[i] = Interval{box.begin[i], box.end[i]};
  }
  return Box(std::move(dims));
}

BoxIr BoxToIr(const Box& box) {
  BoxIr out;
  for (const Interval& d : box.dims()) {
    out.begin.push_back(d.begin);
    out.end.push_back(d.end);
  }
  return out;
}

Box UncheckedBoxFromIr(const BoxIr& box) {
  MS_DCHECK(box.begin.size() == box.end.size()) << BoxIrToString(box);
  std::vector<Interval> dims(box.begin.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    MS_DCHECK(0 <= box.begin[i] && box.begin[i] <= box.end[i]) << BoxIrToString(box);
    dims[i] = Interval{box.begin[i], box.end[i]};
  }
  return Box(std::move(dims));
}

namespace {

// tensor.proto's DTypeProto numbers (ir_conv_test checks them against it).
enum WireDType : int {
  kWireInvalid = 0,
  kWireFloat32 = 1,
  kWireBFloat16 = 2,
  kWireInt32 = 3,
  kWireInt64 = 4,
  kWireFloat16 = 5,
  kWireFloat64 = 6,
  kWireInt8 = 7,
  kWireUInt8 = 8,
  kWireBool = 9,
};

}  // namespace

absl::StatusOr<DType> DTypeFromProto(int dtype) {
  switch (dtype) {
    case kWireFloat32: return DType::kFloat32;
    case kWireBFloat16: return DType::kBFloat16;
    case kWireInt32: return DType::kInt32;
    case kWireInt64: return DType::kInt64;
    case kWireFloat16: return DType::kFloat16;
    case kWireFloat64: return DType::kFloat64;
    case kWireInt8: return DType::kInt8;
    case kWireUInt8: return DType::kUInt8;
    case kWireBool: return DType::kBool;
    default:
      return InvalidArgument("dtype ", dtype,
                             dtype == kWireInvalid ? " (DTYPE_INVALID)" : " (unknown)",
                             " is not a tensor dtype");
  }
}

int DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return kWireFloat32;
    case DType::kBFloat16: return kWireBFloat16;
    case DType::kInt32: return kWireInt32;
    case DType::kInt64: return kWireInt64;
    case DType::kFloat16: return kWireFloat16;
    case DType::kFloat64: return kWireFloat64;
    case DType::kInt8: return kWireInt8;
    case DType::kUInt8: return kWireUInt8;
    case DType::kBool: return kWireBool;
  }
  return kWireInvalid;
}

absl::StatusOr<std::optional<DType>> OptionalDTypeFromProto(int dtype) {
  if (dtype == kWireInvalid) return std::optional<DType>();
  MS_ASSIGN_OR_RETURN(DType parsed, DTypeFromProto(dtype));
  return std::optional<DType>(parsed);
}

int OptionalDTypeToProto(std::optional<DType> dtype) {
  return dtype.has_value() ? DTypeToProto(*dtype) : kWireInvalid;
}

absl::StatusOr<Mesh> MeshFromIr(const std::vector<MeshAxisIr>& axes) {
  std::vector<MeshAxis> out;
  for (const MeshAxisIr& axis : axes) {
    MeshAxis a;
    a.name = axis.name;
    a.size = axis.size;
    if (!axis.type.empty()) {
      MS_ASSIGN_OR_RETURN(a.type, ParseAxisType(axis.type), "mesh axis '", axis.name, "'");
    }
    out.push_back(std::move(a));
  }
  return Mesh::Create(std::move(out));
}

std::vector<MeshAxisIr> MeshToIr(const Mesh& mesh) {
  std::vector<MeshAxisIr> out;
  for (const MeshAxis& axis : mesh.axes()) {
    out.push_back({axis.name, axis.size, std::string(AxisTypeName(axis.type))});
  }
  return out;
}

absl::StatusOr<BoxTensor> BoxTensorFromSlice(const SliceIr& slice) {
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(slice.box), "slice '", slice.name, "'");
  if (!slice.dtype.has_value()) {
    return InvalidArgument("slice '", slice.name, "' on device ", slice.device,
                           " has no dtype (DTYPE_INVALID)");
  }
  const DType dtype = *slice.dtype;
  int64_t bytes = 0;
  if (!CheckedMul(box.NumElements(), DTypeSize(dtype), &bytes)) {
    return InvalidArgument("slice '", slice.name, "' box ", box.ToString(),
                           ": byte size overflows");
  }
  if (bytes != static_cast<int64_t>(slice.data.size())) {
    return InvalidArgument("slice '", slice.name, "' on device ", slice.device,
                           ": byte length mismatch: box ", box.ToString(), " of ",
                           DTypeName(dtype), " needs ", bytes, " bytes, got ",
                           slice.data.size());
  }
  MS_ASSIGN_OR_RETURN(Tensor tensor, Tensor::FromBytes(dtype, box.shape(), slice.data),
                      "slice '", slice.name, "'");
  return BoxTensor::Wrap(std::move(box), std::move(tensor));
}

bool ReadsInPlace(const ComputeStepIr& step, size_t index) {
  return step.op == ComputeOp::kDotGeneral && step.inputs.size() == 2 && index == 1;
}

std::optional<Box> ParamSliceBoxOf(const CopyStepIr& copy) {
  if (!IsParamBuffer(copy.src) || copy.src_device != copy.dst_device || copy.accumulate ||
      copy.dtype.value_or(DType::kFloat32) != DType::kFloat32) {
    return std::nullopt;
  }
  absl::StatusOr<Box> box = BoxFromIr(copy.box), dst_box = BoxFromIr(copy.dst_box);
  if (!box.ok() || !dst_box.ok() || *box != *dst_box || box->rank() != 2) return std::nullopt;
  return *std::move(box);
}

}  // namespace meshserve
