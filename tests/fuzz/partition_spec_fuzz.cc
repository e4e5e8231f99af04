// libFuzzer target: ParsePartitionSpec on arbitrary text.
// Invariants: never crashes; a spec that parses prints (ToString) to text
// that parses back to an equal spec.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "absl/strings/string_view.h"
#include "common/sharding/partition_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<meshserve::PartitionSpec> spec = meshserve::ParsePartitionSpec(text);
  if (!spec.ok()) return 0;
  std::string printed = spec->ToString();
  absl::StatusOr<meshserve::PartitionSpec> again = meshserve::ParsePartitionSpec(printed);
  if (!again.ok() || !(*again == *spec)) {
    std::fprintf(stderr, "round trip failed: %s -> %s\n", printed.c_str(),
                 again.ok() ? again->ToString().c_str()
                            : std::string(again.status().message()).c_str());
    __builtin_trap();
  }
  return 0;
}
