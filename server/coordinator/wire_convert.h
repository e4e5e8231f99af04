// Core types <-> the plain wire mirrors of worker_client.h. No .pb.h here.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_COORDINATOR_WIRE_CONVERT_H_
#define MESHSERVE_SERVER_COORDINATOR_WIRE_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/dtype.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// tensor.proto DType numbers (FLOAT32 = 1, ..., BOOL = 9).
int32_t DTypeToWireNumber(DType dtype);
// \error kInvalidArgument for 0 or an unknown number.
absl::StatusOr<DType> DTypeFromWireNumber(int32_t number);

WireBox BoxToWire(const Box& box);
// \error kInvalidArgument when begin/end lengths differ or end < begin.
absl::StatusOr<Box> BoxFromWire(const WireBox& box);

std::vector<WireMeshAxis> MeshToWire(const Mesh& mesh);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WIRE_CONVERT_H_
