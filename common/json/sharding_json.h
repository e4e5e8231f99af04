// JSON bindings of the sharding vocabulary: one decoder per type, used by
// model files, plan requests and conformance cases (after tensorstore's
// internal/json_binding, one binding per vocabulary type).
//
// Mesh: {"x": 2, "y": 4} -- axes in the order written (major first). Axis
// types come from an optional sibling object {"x": "Explicit"|"Auto"|"Manual"}
// (default Explicit). null is the empty mesh.
//
// PartitionSpec, the one accepted grammar:
//   null                                  P()
//   ["x", null, ["y", "z"]]               one entry per dim: null (None), an
//                                         axis name, or a list of names
//                                         (tuples do not nest; names non-empty)
//   "P('x', None)"                        JAX syntax (ParsePartitionSpec)
//   {"spec": <list|string>, "unreduced": ["y"]}   both optional, no other key
// Axis names are not checked against a mesh here: the caller's validating
// factory (MakeArrayType, NamedSharding::Create) or its own rule does that.
//
// ReshardEndpoint: {"mesh": {...}, "spec": <spec>, "unreduced": [..] (optional),
//                   "devices": [worker per device] (optional, default 0..n-1)}
// validated as a JAX array type of `shape` and `dtype` (MakeArrayType).
//
// Every error is kInvalidArgument and starts with the field path.
//
// Encoding (PartitionSpecToJson) writes the list form, the decoder's inverse.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_JSON_SHARDING_JSON_H_
#define MESHSERVE_COMMON_JSON_SHARDING_JSON_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/json/json_util.h"
#include "common/sharding/mesh.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/reshard_plan.h"

namespace meshserve {

// \error "<path> must be an object {"axis": size, ...}, got <j>"; a size that
// is not an integer ("<path>.<axis> must be an integer"); a type that is not
// a string or not an axis type; `axis_types` naming an axis not in the mesh;
// Mesh::Create's errors prefixed with `path`.
absl::StatusOr<Mesh> MeshFromJson(const Json& j, absl::string_view path,
                                  const Json* axis_types = nullptr,
                                  absl::string_view axis_types_path = "mesh_axis_types");

// \error "<path> must be a list (a PartitionSpec), a P(...) string or
//   {"spec", "unreduced"}, got <j>"; "<path> entry <e> in <j>: entry <i> must
//   be null, an axis name or a list of axis names, got <e>"; nested tuples;
//   empty names; unknown object keys ("unknown field 'specs'"); the parse
//   errors of a P(...) string prefixed with `path`.
absl::StatusOr<PartitionSpec> PartitionSpecFromJson(const Json& j, absl::string_view path);

// The list grammar above (null / "axis" / ["a", "b"] per dim), wrapped in
// {"spec", "unreduced"} when `spec` has unreduced axes. Round-trips through
// PartitionSpecFromJson.
Json PartitionSpecToJson(const PartitionSpec& spec);

// \error a missing "mesh" or "spec" ("missing field 'mesh' in <path>"),
//   the errors above, MakeArrayType's errors prefixed with `path`, or a
//   "devices" list whose length is not the mesh's device count.
absl::StatusOr<ReshardEndpoint> ReshardEndpointFromJson(const Json& j, absl::string_view path,
                                                        absl::Span<const int64_t> shape,
                                                        DType dtype);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_JSON_SHARDING_JSON_H_
