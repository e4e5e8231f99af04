// libFuzzer target for the sharding text parsers and what consumes their output
// (mesh, PartitionSpec, Box text forms). Built by tests/fuzz/CMakeLists.txt and
// run by tests/fuzz/run_fuzzers.sh. Properties checked (trap on violation):
//   * no crash, no UB, no unbounded recursion on any input;
//   * whatever parses round-trips through ToString();
//   * a parsed spec that validates against a fixed mesh yields a layout whose
//     replica groups partition the devices.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/shard_layout.h"

namespace {

void CheckSpec(const std::string& text) {
  auto spec = meshserve::ParsePartitionSpec(text);
  if (!spec.ok()) return;
  auto again = meshserve::ParsePartitionSpec(spec->ToString());
  if (!again.ok() || *again != *spec) __builtin_trap();
  auto mesh = meshserve::ParseMesh("mesh[x=2,y=3,z=2:Auto]");
  if (!mesh.ok()) __builtin_trap();
  auto sharding = meshserve::NamedSharding::Create(*mesh, *spec, 3);
  if (!sharding.ok()) return;
  const std::vector<int64_t> shape = {7, 5, 4};
  (void)meshserve::CheckDivisible(shape, *sharding);
  const auto boxes = meshserve::ShardBoxesByDevice(shape, *sharding);
  int64_t num_members = 0;
  for (const auto& group : meshserve::ReplicaGroups(*sharding)) {
    num_members += static_cast<int64_t>(group.size());
    for (int64_t d : group) {
      if (boxes[d] != boxes[group.front()]) __builtin_trap();
    }
  }
  if (num_members != mesh->num_devices()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckSpec(text);
  auto mesh = meshserve::ParseMesh(text);
  if (mesh.ok()) {
    auto again = meshserve::ParseMesh(mesh->ToString());
    if (!again.ok() || *again != *mesh) __builtin_trap();
  }
  auto box = meshserve::ParseBox(text);
  if (box.ok()) {
    auto again = meshserve::ParseBox(box->ToString());
    if (!again.ok() || *again != *box) __builtin_trap();
    (void)box->NumElements();
  }
  return 0;
}
