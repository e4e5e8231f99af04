// The parts of opt_einsum that jnp.einsum's result depends on: the expansion
// of "..." (opt_einsum/parser.py parse_einsum_input) and the contraction list
// of contract_path(..., optimize="auto", einsum_call=True) (opt_einsum/
// contract.py, paths.py: optimal, helpers.py: flop_count). See einsum.h for
// how the rule uses them.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_EINSUM_PATH_H_
#define MESHSERVE_COMMON_SHARDING_RULES_EINSUM_PATH_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sharding/rules/einsum.h"

namespace meshserve {

// One step of the path: the operands at `positions` of the current list
// (highest first, the order they are popped and `inputs` lists their labels)
// are contracted into `result`, appended at the end of the list; `removed`
// are the labels summed away.
struct EinsumContraction {
  std::vector<int> positions;       // descending
  std::set<char> removed;           // summed away in this step
  std::vector<std::string> inputs;  // labels of positions[0], positions[1]
  std::string result;               // labels of the step's result
};

// Replaces each operand's "..." by the last (rank - other labels) of the
// first max(ranks) unused letters (a-z then A-Z), the output's "..." (or, for
// an implicit output, the output's start) by the longest of them.
// \error kInvalidArgument "Invalid Ellipses." / "Ellipses lengths do not
//   match." naming the equation.
absl::Status ExpandEllipsis(absl::string_view text, absl::Span<const int> ranks,
                            EinsumSubscripts* s);

// The contraction list for operands of `shapes` (size-1 dims broadcast).
// \error kInvalidArgument: a subscript whose length is not its operand's rank,
//   a label with two different sizes (neither 1).
// \error kUnimplemented for five or more operands.
absl::StatusOr<std::vector<EinsumContraction>> EinsumContractionPath(
    absl::string_view text, const EinsumSubscripts& s,
    const std::vector<std::vector<int64_t>>& shapes);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_EINSUM_PATH_H_
