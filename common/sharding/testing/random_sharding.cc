#include "common/sharding/testing/random_sharding.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace meshserve {
namespace testing {
namespace {

constexpr const char* kAxisNames[] = {"x",    "y",     "z",   "data", "model",
                                      "fsdp", "expert", "seq", "pipe", "tp"};

}  // namespace

Mesh RandomMesh(absl::BitGenRef gen, int max_axes, int64_t max_devices,
                const RandomMeshOptions& options) {
  std::vector<std::string> names;
  for (const char* n : kAxisNames) names.push_back(n);
  std::shuffle(names.begin(), names.end(), gen);
  const int num_axes = absl::Uniform<int>(absl::IntervalClosed, gen, 0,
                                          std::max(0, max_axes));
  std::vector<MeshAxis> axes;
  int64_t devices = 1;
  for (int i = 0; i < num_axes; ++i) {
    MeshAxis axis;
    axis.name = i < static_cast<int>(names.size()) ? names[i] : absl::StrCat("a", i);
    const int64_t room = std::max<int64_t>(1, max_devices / devices);
    axis.size = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1,
                                       std::min<int64_t>(8, room));
    const double r = absl::Uniform<double>(gen, 0.0, 1.0);
    if (r < options.auto_probability) {
      axis.type = AxisType::kAuto;
    } else if (r < options.auto_probability + options.manual_probability) {
      axis.type = AxisType::kManual;
    }
    devices *= axis.size;
    axes.push_back(std::move(axis));
  }
  auto mesh = Mesh::Create(std::move(axes));
  MS_CHECK(mesh.ok());  // invariant: names distinct identifiers, sizes >= 1
  return *std::move(mesh);
}

PartitionSpec RandomPartitionSpec(absl::BitGenRef gen, const Mesh& mesh, int rank,
                                  const RandomSpecOptions& options) {
  std::vector<PartitionSpec::Entry> entries(std::max(0, rank));
  std::vector<std::string> unreduced;
  std::vector<int> order(mesh.num_axes());
  for (int i = 0; i < mesh.num_axes(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), gen);
  for (int a : order) {
    const std::string& name = mesh.axis(a).name;
    if (rank > 0 && absl::Bernoulli(gen, options.use_axis_probability)) {
      entries[absl::Uniform<int>(gen, 0, rank)].push_back(name);
    } else if (absl::Bernoulli(gen, options.unreduced_probability)) {
      unreduced.push_back(name);
    }
  }
  PartitionSpec spec(std::move(entries), std::move(unreduced));
  if (absl::Bernoulli(gen, options.trim_probability)) {
    spec = spec.WithoutTrailingNones();
  }
  return spec;
}

std::vector<int64_t> RandomDivisibleShape(absl::BitGenRef gen,
                                          const NamedSharding& sharding,
                                          int64_t max_dim) {
  std::vector<int64_t> shape(sharding.rank());
  for (int d = 0; d < sharding.rank(); ++d) {
    const int64_t k = sharding.NumShardsAlongDim(d);
    const int64_t max_multiple = std::max<int64_t>(1, max_dim / k);
    shape[d] = k * absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, max_multiple);
  }
  return shape;
}

std::vector<int64_t> RandomShape(absl::BitGenRef gen, int rank, int64_t max_dim) {
  std::vector<int64_t> shape(std::max(0, rank));
  for (int64_t& d : shape) {
    d = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, max_dim);
  }
  return shape;
}

NamedSharding RandomNamedSharding(absl::BitGenRef gen, int rank, int max_axes,
                                  int64_t max_devices) {
  Mesh mesh = RandomMesh(gen, max_axes, max_devices);
  PartitionSpec spec = RandomPartitionSpec(gen, mesh, rank);
  auto sharding = NamedSharding::Create(std::move(mesh), std::move(spec), rank);
  MS_CHECK(sharding.ok());  // invariant: RandomPartitionSpec's guarantees
  return *std::move(sharding);
}

}  // namespace testing
}  // namespace meshserve
