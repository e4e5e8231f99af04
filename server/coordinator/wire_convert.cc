#include "server/coordinator/wire_convert.h"

#include <string>

#include "absl/strings/str_join.h"
#include "common/base/status_util.h"

namespace meshserve {

int32_t DTypeToWireNumber(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 3;
    case DType::kInt64: return 4;
    case DType::kFloat16: return 5;
    case DType::kFloat64: return 6;
    case DType::kInt8: return 7;
    case DType::kUInt8: return 8;
    case DType::kBool: return 9;
  }
  return 0;
}

absl::StatusOr<DType> DTypeFromWireNumber(int32_t number) {
  switch (number) {
    case 1: return DType::kFloat32;
    case 2: return DType::kBFloat16;
    case 3: return DType::kInt32;
    case 4: return DType::kInt64;
    case 5: return DType::kFloat16;
    case 6: return DType::kFloat64;
    case 7: return DType::kInt8;
    case 8: return DType::kUInt8;
    case 9: return DType::kBool;
    default: return InvalidArgument("unknown wire dtype ", number);
  }
}

WireBox BoxToWire(const Box& box) {
  WireBox out;
  for (const Interval& i : box.dims()) {
    out.begin.push_back(i.begin);
    out.end.push_back(i.end);
  }
  return out;
}

absl::StatusOr<Box> BoxFromWire(const WireBox& box) {
  if (box.begin.size() != box.end.size()) {
    return InvalidArgument("box with ", box.begin.size(), " begins and ",
                           box.end.size(), " ends");
  }
  std::vector<Interval> dims;
  for (size_t i = 0; i < box.begin.size(); ++i) {
    if (box.end[i] < box.begin[i] || box.begin[i] < 0) {
      return InvalidArgument("bad box begin=[", absl::StrJoin(box.begin, ","),
                             "] end=[", absl::StrJoin(box.end, ","), "]");
    }
    dims.push_back(Interval{box.begin[i], box.end[i]});
  }
  return Box(std::move(dims));
}

std::vector<WireMeshAxis> MeshToWire(const Mesh& mesh) {
  std::vector<WireMeshAxis> out;
  for (const MeshAxis& axis : mesh.axes()) {
    out.push_back({axis.name, axis.size, std::string(AxisTypeName(axis.type))});
  }
  return out;
}

}  // namespace meshserve
