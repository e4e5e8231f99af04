#include "common/sharding/named_sharding.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"

namespace meshserve {
namespace {

bool KeptInTypeString(const Mesh& mesh, const std::string& axis) {
  std::optional<int> index = mesh.AxisIndex(axis);
  return !index.has_value() || mesh.axis(*index).type == AxisType::kExplicit;
}

}  // namespace

absl::StatusOr<NamedSharding> NamedSharding::Create(Mesh mesh,
                                                    PartitionSpec spec,
                                                    int rank) {
  if (rank < 0) return InvalidArgument("negative rank ", rank);
  absl::flat_hash_set<std::string> used;
  for (const PartitionSpec::Entry& entry : spec.entries()) {
    for (const std::string& axis : entry) {
      if (!mesh.AxisIndex(axis).has_value()) {
        return InvalidArgument("Resource axis: ", axis, " of ", spec.ToString(),
                               " is not found in mesh: ",
                               MeshAxisNamesRepr(mesh), ".");
      }
      if (!used.insert(axis).second) {
        return InvalidArgument(
            "A single NamedSharding spec specification can map every mesh axis "
            "to at most one positional dimension, but ",
            spec.ToString(), " has duplicate entries for `", axis, "`");
      }
    }
  }
  for (const std::string& axis : spec.unreduced()) {
    if (!mesh.AxisIndex(axis).has_value()) {
      return InvalidArgument("Unreduced axis: ", axis, " of ", spec.ToString(),
                             " is not found in mesh: ",
                             MeshAxisNamesRepr(mesh), ".");
    }
    if (used.contains(axis)) {
      return InvalidArgument(
          "partitions cannot overlap with unreduced axes passed to "
          "PartitionSpec. Got ",
          spec.ToString(), " where axis `", axis,
          "` is both in the partitions and unreduced");
    }
  }
  if (spec.size() > rank) {
    return InvalidArgument("Length of sharding.spec (", spec.size(),
                           ") must be equal to aval's ndim (", rank, ")");
  }
  std::vector<std::string> unreduced = InMeshOrder(mesh, spec.unreduced());
  PartitionSpec padded = spec.PaddedTo(rank).WithUnreduced(std::move(unreduced));
  return NamedSharding(std::move(mesh), std::move(padded));
}

NamedSharding NamedSharding::UncheckedCreate(Mesh mesh, PartitionSpec spec) {
  // Invariant (caller's promise): every axis named is in the mesh, used once.
  for (const std::string& axis : spec.AxesUsed()) {
    MS_DCHECK(mesh.AxisIndex(axis).has_value());
  }
  return NamedSharding(std::move(mesh), std::move(spec));
}

int64_t NamedSharding::NumShardsAlongDim(int dim) const {
  int64_t n = 1;
  for (const std::string& axis : spec_.entry(dim)) {
    std::optional<int> index = mesh_.AxisIndex(axis);
    MS_DCHECK(index.has_value());  // validated by Create
    if (index.has_value()) n *= mesh_.axis(*index).size;
  }
  return n;
}

std::string NamedSharding::ToString() const {
  return absl::StrCat("NamedSharding(", mesh_.ToString(), ", ", spec_.ToString(),
                      ")");
}

PartitionSpec ExplicitOnlySpec(const Mesh& mesh, const PartitionSpec& spec) {
  auto keep = [&mesh](const std::string& axis) { return KeptInTypeString(mesh, axis); };
  std::vector<PartitionSpec::Entry> entries;
  entries.reserve(spec.size());
  for (const PartitionSpec::Entry& entry : spec.entries()) {
    PartitionSpec::Entry kept;
    for (const std::string& axis : entry) {
      if (keep(axis)) kept.push_back(axis);
    }
    entries.push_back(std::move(kept));
  }
  std::vector<std::string> unreduced;
  for (const std::string& axis : spec.unreduced()) {
    if (keep(axis)) unreduced.push_back(axis);
  }
  return PartitionSpec(std::move(entries), std::move(unreduced));
}

absl::Status CheckDivisible(absl::Span<const int64_t> shape,
                            const NamedSharding& sharding) {
  const PartitionSpec spec = ExplicitOnlySpec(sharding.mesh(), sharding.spec());
  for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
    const PartitionSpec::Entry& entry = spec.entry(dim);
    if (entry.empty()) continue;
    int64_t total = 1;
    for (const std::string& axis : entry) {
      std::optional<int> index = sharding.mesh().AxisIndex(axis);
      if (index.has_value()) total *= sharding.mesh().axis(*index).size;
    }
    if (shape[dim] % total != 0) {
      return InvalidArgument(
          "Sharding spec ", PyTupleRepr(entry), " implies that array axis ", dim,
          " is partitioned ", total,
          " times, but does not evenly divide the dimension size ", shape[dim],
          ". Got shape: ", PyTupleRepr(shape), " and sharding ",
          spec.WithoutTrailingNones().ToString());
    }
  }
  return absl::OkStatus();
}

int64_t ArrayType::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TypeStringFromParts(DType dtype, absl::Span<const int64_t> shape,
                                const Mesh& mesh,
                                absl::Span<const PartitionSpec::Entry> entries,
                                absl::Span<const std::string> unreduced,
                                absl::Span<const std::string> varying, bool short_dtype) {
  std::string out(short_dtype ? DTypeShortName(dtype) : DTypeName(dtype));
  out += "[";
  for (size_t dim = 0; dim < shape.size(); ++dim) {
    if (dim > 0) out += ",";
    absl::StrAppend(&out, shape[dim]);
    std::vector<std::string> axes;
    if (dim < entries.size()) {
      for (const std::string& axis : entries[dim]) {
        if (KeptInTypeString(mesh, axis)) axes.push_back(axis);
      }
    }
    if (!axes.empty()) absl::StrAppend(&out, "@", AxisSetRepr(axes));
  }
  out += "]";
  std::vector<std::string> parts;
  std::vector<std::string> vary = InMeshOrder(mesh, {varying.begin(), varying.end()});
  if (!vary.empty()) parts.push_back(absl::StrCat("V:", AxisSetRepr(vary)));
  std::vector<std::string> kept;
  for (const std::string& axis : unreduced) {
    if (KeptInTypeString(mesh, axis)) kept.push_back(axis);
  }
  kept = InMeshOrder(mesh, std::move(kept));
  if (!kept.empty()) parts.push_back(absl::StrCat("U:", AxisSetRepr(kept)));
  if (!parts.empty()) absl::StrAppend(&out, "{", absl::StrJoin(parts, ", "), "}");
  return out;
}

std::string ArrayType::ToString(bool short_dtype) const {
  return TypeStringFromParts(dtype, shape, sharding.mesh(), sharding.spec().entries(),
                             sharding.spec().unreduced(), varying, short_dtype);
}

absl::StatusOr<ArrayType> MakeArrayType(DType dtype, std::vector<int64_t> shape,
                                        const Mesh& mesh, PartitionSpec spec) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return InvalidArgument("negative dimension ", shape[i], " at dim ", i,
                             " of shape ", PyTupleRepr(shape));
    }
  }
  int64_t num_bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (!CheckedMul(num_bytes, d, &num_bytes)) {
      return InvalidArgument("shape ", PyTupleRepr(shape), " of ", DTypeName(dtype),
                             " overflows int64 bytes");
    }
  }
  auto sharding = NamedSharding::Create(mesh, std::move(spec),
                                        static_cast<int>(shape.size()));
  if (!sharding.ok()) return sharding.status();
  absl::Status divisible = CheckDivisible(shape, *sharding);
  if (!divisible.ok()) return divisible;
  ArrayType type;
  type.dtype = dtype;
  type.shape = std::move(shape);
  type.sharding = *std::move(sharding);
  return type;
}

}  // namespace meshserve
