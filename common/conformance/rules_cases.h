// The sharding-rule conformance cases
// (/work/shared/conformance/sharding-rules/README.md): decode a case file,
// run each case through common/sharding/rules, and print one JSON line per
// case:
//   {"id": "dot_x_y", "spec": ["x", "y"], "type_str": "float32[8@x,8@y]"}
//   {"id": "dot_err", "error": "Contracting dimensions are sharded and ..."}
// "unreduced" / "varying" are added when the result has such axes.
//
// Case schema:
//   {"id", "source", "op", "params",
//    "mesh": {"axis": size, ...}            (ordered: first axis is major)
//    "mesh_axis_types": {"axis": "Explicit"|"Auto"|"Manual"}   (optional)
//    "inputs": [{"shape": [...], "spec": [null | "a" | ["a","b"], ...],
//                "dtype"?, "varying"?, "unreduced"?}, ...],
//    "out_sharding": null | spec | {"spec": spec, "unreduced": [...]},
//    "expect": ...}                          (ignored here)
// A spec may also be a string in JAX syntax ("P('x', None)").
//
// dtype convention (implemented in CaseDType): an input's own "dtype" wins,
// then params.dtype, then the case's "dtype"; otherwise float32, EXCEPT that a
// case whose "source" names the seed discussion ("seed discussion") takes the
// seed model's dtype, bfloat16 (the SwiGLU block in /work/shared/seed/ is
// bfloat16, and those cases expect "bfloat16[...]" type strings).
//
// Ops: the README's table (dot_general, einsum, add, mul, select, reshape,
// transpose, reduce_sum, reduce_max, cumsum, concatenate, stack, split, slice,
// pad, tile, expand_dims, squeeze, broadcast_to, conv_general_dilated,
// reshard, auto_axes, make_type, shard_map_body_type) plus more elementwise
// names (sub, div, max, min, pow, exp, neg, tanh, ...), reduce_min/prod,
// cumprod/cummax/cummin, and the model ops (linear, rms_norm, layer_norm,
// softmax, embed, embed_attend). split reports its first output (all outputs
// share the operand's sharding).
//
// Robustness: malformed input (broken JSON, missing fields, wrong types,
// unknown op, bad spec) never crashes: a broken file is an error naming the
// problem; a broken case becomes an error line for that case.
//
// Thread-safety: pure functions over plain values.
#ifndef MESHSERVE_COMMON_CONFORMANCE_RULES_CASES_H_
#define MESHSERVE_COMMON_CONFORMANCE_RULES_CASES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sharding/named_sharding.h"
#include "nlohmann/json.hpp"

namespace meshserve {

// One case's outcome: the decoded inputs (when decoding got that far) and the
// result type or the error.
struct RulesCaseOutcome {
  std::string id;
  std::string op;
  std::vector<ArrayType> inputs;
  absl::StatusOr<ArrayType> result = absl::UnknownError("not run");
};

// Runs one case (a JSON object). Never throws; `index` names cases without id.
RulesCaseOutcome RunRulesCase(const nlohmann::ordered_json& case_json, size_t index);

// Parses a case file's text (a JSON array of cases, or one case object) and
// runs every case.
// \error kInvalidArgument for text that is not JSON or not an array/object,
//   naming the parse error position.
absl::StatusOr<std::vector<RulesCaseOutcome>> RunRulesCaseFile(absl::string_view text);

// The contract's JSON object for an outcome.
nlohmann::ordered_json RulesOutcomeToJson(const RulesCaseOutcome& outcome);

// The JSON spec of a result: null / "a" / ["a","b"] per dim (Explicit only).
nlohmann::ordered_json SpecToJson(const ArrayType& type);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_CONFORMANCE_RULES_CASES_H_
