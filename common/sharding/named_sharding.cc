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

namespace meshserve {
namespace {

// Python's repr of a tuple of strings: (), ('x',), ('x', 'y').
std::string PyTuple(const std::vector<std::string>& names) {
  std::string out = "(";
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", "'", names[i], "'");
  }
  if (names.size() == 1) out += ",";
  out += ")";
  return out;
}

// Python's repr of a shape tuple: (), (5,), (5, 2).
std::string PyShape(absl::Span<const int64_t> shape) {
  std::string out = absl::StrCat("(", absl::StrJoin(shape, ", "));
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

std::vector<std::string> MeshAxisNames(const Mesh& mesh) {
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh.axes()) names.push_back(a.name);
  return names;
}

// `names` (deduplicated) reordered to mesh order; unknown names go last.
std::vector<std::string> InMeshOrder(const Mesh& mesh,
                                     const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const MeshAxis& a : mesh.axes()) {
    for (const std::string& n : names) {
      if (n == a.name) {
        out.push_back(n);
        break;
      }
    }
  }
  for (const std::string& n : names) {
    if (!mesh.AxisIndex(n).has_value()) out.push_back(n);
  }
  return out;
}

// "x" or "(x,y)".
std::string AxisSet(const std::vector<std::string>& names) {
  if (names.size() == 1) return names[0];
  return absl::StrCat("(", absl::StrJoin(names, ","), ")");
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
                               PyTuple(MeshAxisNames(mesh)), ".");
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
                             PyTuple(MeshAxisNames(mesh)), ".");
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
  auto keep = [&mesh](const std::string& axis) {
    std::optional<int> index = mesh.AxisIndex(axis);
    return !index.has_value() || mesh.axis(*index).type == AxisType::kExplicit;
  };
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
          "Sharding spec ", PyTuple(entry), " implies that array axis ", dim,
          " is partitioned ", total,
          " times, but does not evenly divide the dimension size ", shape[dim],
          ". Got shape: ", PyShape(shape), " and sharding ",
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

std::string ArrayType::ToString(bool short_dtype) const {
  const Mesh& mesh = sharding.mesh();
  const PartitionSpec spec = ExplicitOnlySpec(mesh, sharding.spec());
  std::string out(short_dtype ? DTypeShortName(dtype) : DTypeName(dtype));
  out += "[";
  for (int dim = 0; dim < rank(); ++dim) {
    if (dim > 0) out += ",";
    absl::StrAppend(&out, shape[dim]);
    const PartitionSpec::Entry& entry = spec.entry(dim);
    if (!entry.empty()) absl::StrAppend(&out, "@", AxisSet(entry));
  }
  out += "]";
  std::vector<std::string> parts;
  std::vector<std::string> vary = InMeshOrder(mesh, varying);
  if (!vary.empty()) parts.push_back(absl::StrCat("V:", AxisSet(vary)));
  std::vector<std::string> unreduced = InMeshOrder(mesh, spec.unreduced());
  if (!unreduced.empty()) parts.push_back(absl::StrCat("U:", AxisSet(unreduced)));
  if (!parts.empty()) absl::StrAppend(&out, "{", absl::StrJoin(parts, ", "), "}");
  return out;
}

absl::StatusOr<ArrayType> MakeArrayType(DType dtype, std::vector<int64_t> shape,
                                        const Mesh& mesh, PartitionSpec spec) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return InvalidArgument("negative dimension ", shape[i], " at dim ", i,
                             " of shape ", PyShape(shape));
    }
  }
  int64_t num_bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (!CheckedMul(num_bytes, d, &num_bytes)) {
      return InvalidArgument("shape ", PyShape(shape), " of ", DTypeName(dtype),
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
