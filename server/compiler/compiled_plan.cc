#include "server/compiler/compiled_plan.h"

#include "absl/strings/str_cat.h"

namespace meshserve {

std::string CompiledPlan::ToString() const {
  std::string out;
  for (const LayerPlanInfo& l : layers) {
    absl::StrAppend(&out, l.layer, " = ", l.OpName(), " -> ", l.type, "\n    strategy: ", l.strategy,
                    "\n");
    if (l.max_device_flops > 0) {
      absl::StrAppend(&out, "    max flops per device: ", l.max_device_flops, "\n");
    }
    for (const CollectiveInfo& c : l.collectives) {
      absl::StrAppend(&out, "    ", c.purpose, " ", c.value, ": ", c.from, " -> ", c.to, "  ",
                      c.pattern, ", ", c.bytes, " bytes\n");
    }
  }
  absl::StrAppend(&out, "bytes moved per request: ", bytes_moved, "\n");
  return out;
}

}  // namespace meshserve
