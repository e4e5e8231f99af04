#include "common/sharding/rules/make_type.h"

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {

absl::StatusOr<ArrayType> MakeTypeRule(DType dtype, const std::vector<int64_t>& shape,
                                       const Mesh& mesh, const PartitionSpec& spec) {
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("array dims must be non-negative, got shape ", PyTupleRepr(shape));
  }
  MS_ASSIGN_OR_RETURN(ArrayType t, MakeArrayType(dtype, shape, mesh, spec));
  // The type keeps only Explicit axes.
  rules::Entries e = rules::ExplicitEntries(t);
  std::vector<std::string> unreduced;
  for (const std::string& u : spec.unreduced()) {
    std::optional<int> i = mesh.AxisIndex(u);
    if (i.has_value() && mesh.axis(*i).type == AxisType::kExplicit) unreduced.push_back(u);
  }
  return MakeArrayType(dtype, shape, mesh, PartitionSpec(std::move(e), std::move(unreduced)));
}

}  // namespace meshserve
