// libFuzzer target: the conformance case decoder + every sharding rule on
// arbitrary JSON. Invariants: never crashes (malformed input is an error line
// or a file error), every output line serialises, and every result type has a
// rank-sized spec.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/conformance/rules_cases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<meshserve::RulesCaseOutcome>> outcomes =
      meshserve::RunRulesCaseFile(text);
  if (!outcomes.ok()) return 0;
  for (const meshserve::RulesCaseOutcome& o : *outcomes) {
    std::string line = meshserve::RulesOutcomeToJson(o).dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (line.empty()) __builtin_trap();
    if (o.result.ok() && meshserve::SpecToJson(*o.result).size() != o.result->shape.size()) {
      __builtin_trap();
    }
  }
  return 0;
}
