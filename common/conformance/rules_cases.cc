#include "common/conformance/rules_cases.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/conformance/rules_case_decode.h"
#include "common/json/sharding_json.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

// The dtype convention (see the header): an input's own dtype wins (applied in
// InputFromJson), then params.dtype, then the case's dtype, then bfloat16 for
// cases from the seed discussion (the seed's SwiGLU block is bfloat16), then
// float32.
absl::StatusOr<DType> CaseDType(const Json& c) {
  for (const Json* obj : {c.contains("params") ? &c["params"] : nullptr, &c}) {
    if (obj == nullptr || !obj->is_object()) continue;
    auto it = obj->find("dtype");
    if (it == obj->end() || it->is_null()) continue;
    if (!it->is_string()) {
      return InvalidArgument("dtype must be a string, got ", ShowJson(*it));
    }
    return ParseDType(it->get<std::string>());
  }
  auto src = c.find("source");
  if (src != c.end() && src->is_string() &&
      absl::StrContains(absl::AsciiStrToLower(src->get<std::string>()), "seed discussion")) {
    return DType::kBFloat16;
  }
  return DType::kFloat32;
}

absl::StatusOr<ArrayType> RunCase(const Json& c, RulesCaseOutcome* outcome) {
  if (!c.is_object()) {
    return InvalidArgument("a case must be a JSON object, got ", ShowJson(c));
  }
  MS_ASSIGN_OR_RETURN(outcome->op, rules_case::GetString(c, "op", "case"));
  static const Json kEmpty = Json::object();
  const Json* params = &kEmpty;
  if (auto it = c.find("params"); it != c.end() && !it->is_null()) {
    if (!it->is_object()) {
      return InvalidArgument("params must be an object, got ", ShowJson(*it));
    }
    params = &*it;
  }
  const Json* types = nullptr;
  if (auto it = c.find("mesh_axis_types"); it != c.end()) types = &*it;
  auto mesh_it = c.find("mesh");
  if (mesh_it == c.end()) return InvalidArgument("case.mesh is required");
  MS_ASSIGN_OR_RETURN(Mesh mesh, MeshFromJson(*mesh_it, "mesh", types));
  MS_ASSIGN_OR_RETURN(DType dtype, CaseDType(c));
  auto inputs_it = c.find("inputs");
  if (inputs_it == c.end() || !inputs_it->is_array()) {
    return InvalidArgument("case.inputs must be a list of {shape, spec}, got ",
                           inputs_it == c.end() ? "nothing" : ShowJson(*inputs_it));
  }
  for (size_t i = 0; i < inputs_it->size(); ++i) {
    MS_ASSIGN_OR_RETURN(ArrayType t, rules_case::InputFromJson((*inputs_it)[i], mesh, dtype,
                                                               absl::StrCat("inputs[", i, "]")));
    outcome->inputs.push_back(std::move(t));
  }
  std::optional<PartitionSpec> out;
  if (auto it = c.find("out_sharding"); it != c.end()) {
    MS_ASSIGN_OR_RETURN(out, rules_case::OutShardingFromJson(*it));
  }
  return rules_case::RunOp(outcome->op, *params, outcome->inputs, out);
}

}  // namespace

RulesCaseOutcome RunRulesCase(const Json& case_json, size_t index) {
  RulesCaseOutcome outcome;
  outcome.id = absl::StrCat("case#", index);
  try {
    if (case_json.is_object()) {
      auto it = case_json.find("id");
      if (it != case_json.end() && it->is_string()) {
        outcome.id = it->get<std::string>();
      } else if (it != case_json.end() && it->is_number()) {
        outcome.id = it->dump();
      }
    }
    outcome.result = RunCase(case_json, &outcome);
  } catch (const std::exception& e) {
    outcome.result = InvalidArgument("malformed case ", outcome.id, ": ", e.what());
  }
  return outcome;
}

absl::StatusOr<std::vector<RulesCaseOutcome>> RunRulesCaseFile(absl::string_view text) {
  MS_ASSIGN_OR_RETURN(Json cases, ParseJsonText(text), "case file is not valid JSON");
  if (cases.is_object()) cases = Json::array({cases});
  if (!cases.is_array()) {
    return InvalidArgument("case file must hold a JSON array of cases, got ",
                           ShowJson(cases));
  }
  std::vector<RulesCaseOutcome> out;
  for (size_t i = 0; i < cases.size(); ++i) out.push_back(RunRulesCase(cases[i], i));
  return out;
}

Json SpecToJson(const ArrayType& type) {
  return PartitionSpecToJson(PartitionSpec(rules::ExplicitEntries(type)));
}

Json RulesOutcomeToJson(const RulesCaseOutcome& outcome) {
  Json j = Json::object();
  j["id"] = outcome.id;
  if (!outcome.result.ok()) {
    j["error"] = std::string(outcome.result.status().message());
    return j;
  }
  const ArrayType& t = *outcome.result;
  j["spec"] = SpecToJson(t);
  j["type_str"] = t.ToString();
  if (!t.spec().unreduced().empty()) j["unreduced"] = t.spec().unreduced();
  if (!t.varying.empty()) j["varying"] = t.varying;
  return j;
}

}  // namespace meshserve
