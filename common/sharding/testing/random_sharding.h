// Random meshes, specs and shapes for property tests (cf. tensorstore
// index_transform_testutil.h). Every generator takes an absl::BitGenRef so a
// test seeded through seed.h is reproducible.
//
// Guarantees:
//   RandomMesh: valid (Mesh::Create succeeds), 0..max_axes axes, num_devices <=
//     max_devices; axis names are distinct identifiers; sizes in [1, 8].
//   RandomPartitionSpec: valid for NamedSharding::Create(mesh, spec, rank):
//     every axis is used at most once across entries and unreduced; some entries
//     are tuples; the spec may be shorter than rank.
//   RandomDivisibleShape: each dim is a positive multiple of the sharding's
//     NumShardsAlongDim, at most max(max_dim, that count).
//   RandomShape: dims in [0, max_dim], no divisibility (for the uneven rule).
#ifndef MESHSERVE_COMMON_SHARDING_TESTING_RANDOM_SHARDING_H_
#define MESHSERVE_COMMON_SHARDING_TESTING_RANDOM_SHARDING_H_

#include <cstdint>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {
namespace testing {

struct RandomMeshOptions {
  // Probability that an axis is Auto / Manual rather than Explicit.
  double auto_probability = 0.0;
  double manual_probability = 0.0;
};

Mesh RandomMesh(absl::BitGenRef gen, int max_axes, int64_t max_devices,
                const RandomMeshOptions& options = {});

struct RandomSpecOptions {
  double use_axis_probability = 0.6;   // an axis is placed in some entry
  double unreduced_probability = 0.1;  // an unplaced axis becomes unreduced
  double trim_probability = 0.3;       // trailing Nones are dropped
};

PartitionSpec RandomPartitionSpec(absl::BitGenRef gen, const Mesh& mesh, int rank,
                                  const RandomSpecOptions& options = {});

std::vector<int64_t> RandomDivisibleShape(absl::BitGenRef gen,
                                          const NamedSharding& sharding,
                                          int64_t max_dim);

std::vector<int64_t> RandomShape(absl::BitGenRef gen, int rank, int64_t max_dim);

// A valid NamedSharding of `rank` over a RandomMesh(gen, max_axes, max_devices).
NamedSharding RandomNamedSharding(absl::BitGenRef gen, int rank, int max_axes,
                                  int64_t max_devices);

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_TESTING_RANDOM_SHARDING_H_
