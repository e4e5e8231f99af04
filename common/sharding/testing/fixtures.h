// Test fixtures that read like JAX code, shared by the sharding and rule tests:
//
//   Mesh mesh = MeshOrDie("mesh[x=2,y=4]");
//   PartitionSpec spec = SpecOrDie("P('x', None)");
//   NamedSharding s = ShardingOrDie("mesh[x=2,y=4]", "P('x', None)", /*rank=*/2);
//
// Fixture text is written by the test's author, so a parse error is a bug in
// the test: these abort with the error (never used on input from outside).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_TESTING_FIXTURES_H_
#define MESHSERVE_COMMON_SHARDING_TESTING_FIXTURES_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/base/logging.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {
namespace testing {

inline Mesh MeshOrDie(absl::string_view text) {
  absl::StatusOr<Mesh> mesh = ParseMesh(text);
  MS_CHECK(mesh.ok()) << "fixture mesh " << text << ": " << mesh.status();
  return *mesh;
}

inline PartitionSpec SpecOrDie(absl::string_view text) {
  absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec(text);
  MS_CHECK(spec.ok()) << "fixture spec " << text << ": " << spec.status();
  return *spec;
}

// NamedSharding(mesh, spec) for an array of `rank` dims.
inline NamedSharding ShardingOrDie(absl::string_view mesh, absl::string_view spec,
                                   int64_t rank) {
  absl::StatusOr<NamedSharding> s =
      NamedSharding::Create(MeshOrDie(mesh), SpecOrDie(spec), rank);
  MS_CHECK(s.ok()) << "fixture sharding " << mesh << " " << spec << ": " << s.status();
  return *s;
}

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_TESTING_FIXTURES_H_
