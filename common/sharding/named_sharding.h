// NamedSharding (mesh + PartitionSpec) and the array type built on it.
//
// NamedSharding::Create validates a spec against a mesh and a rank, with JAX's
// errors (jax/_src/named_sharding.py, core.py):
//   unknown axis   kInvalidArgument "Resource axis: z of P('z') is not found in
//                  mesh: ('x', 'y')."   (JAX: "... is undefined." in older text)
//   axis twice     kInvalidArgument "A single NamedSharding spec specification can
//                  map every mesh axis to at most one positional dimension, but
//                  P('x', 'x') has duplicate entries for `x`"
//   too long       kInvalidArgument "Length of sharding.spec (4) must be equal to
//                  aval's ndim (3)"  -- note: only longer is an error; shorter is
//                  padded with None.
//   unreduced axis also in entries, or unknown: kInvalidArgument naming it.
// The stored spec is padded to the rank.
//
// ArrayType is what jax.typeof(x) shows: dtype, shape and the sharding; its
// type string keeps only Explicit axes (Auto and Manual axes are dropped from
// the entries and the unreduced set, core.modify_spec_for_auto_manual):
//   float32[8@fsdp,4096,8192@model]
//   float32[128@(model,data),64]
//   bfloat16[8@fsdp,4096,2048]{U:model}
//   int32[4,2@y]{V:x}          (varying manual axes, inside shard_map)
// Suffix sets list axes in mesh order, "V:x" or "V:(x,y)"; parts are joined by
// ", " in the order V, U.
//
// Thread-safety: immutable value types.
#ifndef MESHSERVE_COMMON_SHARDING_NAMED_SHARDING_H_
#define MESHSERVE_COMMON_SHARDING_NAMED_SHARDING_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/sharding/mesh.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

class NamedSharding {
 public:
  NamedSharding() = default;  // empty mesh, P()

  // Validates (see file comment) and pads `spec` to `rank`.
  static absl::StatusOr<NamedSharding> Create(Mesh mesh, PartitionSpec spec,
                                              int rank);
  // Unchecked twin for values already validated (DCHECKs only).
  static NamedSharding UncheckedCreate(Mesh mesh, PartitionSpec spec);

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  int rank() const { return spec_.size(); }

  // Product of the sizes of the axes in dim's entry (1 for None).
  int64_t NumShardsAlongDim(int dim) const;
  bool IsFullyReplicated() const { return spec_.IsFullyReplicated(); }

  std::string ToString() const;  // "NamedSharding(mesh[x=2,y=2], P('x', None))"

  friend bool operator==(const NamedSharding& a, const NamedSharding& b) {
    return a.mesh_ == b.mesh_ && a.spec_ == b.spec_;
  }
  friend bool operator!=(const NamedSharding& a, const NamedSharding& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const NamedSharding& s) {
    return H::combine(std::move(h), s.mesh_, s.spec_);
  }
  friend std::ostream& operator<<(std::ostream& os, const NamedSharding& s) {
    return os << s.ToString();
  }

 private:
  NamedSharding(Mesh mesh, PartitionSpec spec)
      : mesh_(std::move(mesh)), spec_(std::move(spec)) {}
  Mesh mesh_;
  PartitionSpec spec_;
};

// JAX's divisibility rule (core._check_divisibility): every dim must be
// divisible by the product of its Explicit axes' sizes.
// \error kInvalidArgument "Sharding spec ('x',) implies that array axis 0 is
//   partitioned 2 times, but does not evenly divide the dimension size 5. Got
//   shape: (5, 2) and sharding P('x')".
absl::Status CheckDivisible(absl::Span<const int64_t> shape,
                            const NamedSharding& sharding);

// The spec with Auto/Manual axes removed from entries and unreduced (what
// jax.typeof shows).
PartitionSpec ExplicitOnlySpec(const Mesh& mesh, const PartitionSpec& spec);

// What jax.typeof(x) shows. `sharding.spec()` has rank() == shape.size().
struct ArrayType {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  NamedSharding sharding;
  // Manual axes the value varies over (inside shard_map), mesh order.
  std::vector<std::string> varying;

  const PartitionSpec& spec() const { return sharding.spec(); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t NumElements() const;
  int64_t NumBytes() const { return NumElements() * DTypeSize(dtype); }

  // "float32[8@fsdp,4096,8192@model]"; short_dtype=true gives "f32[...]" as in
  // JAX's error messages.
  std::string ToString(bool short_dtype = false) const;

  friend bool operator==(const ArrayType& a, const ArrayType& b) {
    return a.dtype == b.dtype && a.shape == b.shape && a.sharding == b.sharding &&
           a.varying == b.varying;
  }
  friend bool operator!=(const ArrayType& a, const ArrayType& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const ArrayType& t) {
    return H::combine(std::move(h), t.dtype, t.shape, t.sharding, t.varying);
  }
  friend std::ostream& operator<<(std::ostream& os, const ArrayType& t) {
    return os << t.ToString();
  }
};

// The type string from raw parts, without validation, so error messages can
// show an illegal result ("f32[8@x,8@x]"). Auto and Manual axes are dropped
// from `entries` and `unreduced` (names unknown to `mesh` are kept); suffix
// sets are in InMeshOrder (repr.h). ArrayType::ToString is this function on
// the type's own parts.
std::string TypeStringFromParts(DType dtype, absl::Span<const int64_t> shape,
                                const Mesh& mesh,
                                absl::Span<const PartitionSpec::Entry> entries,
                                absl::Span<const std::string> unreduced,
                                absl::Span<const std::string> varying, bool short_dtype);

// Validates `spec` against mesh and shape (NamedSharding::Create, then
// CheckDivisible on Explicit axes) and builds the type.
absl::StatusOr<ArrayType> MakeArrayType(DType dtype, std::vector<int64_t> shape,
                                        const Mesh& mesh, PartitionSpec spec);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_NAMED_SHARDING_H_
