// lax.conv_general_dilated's sharding rule (jax/_src/lax/convolution.py:
// _conv_general_dilated_sharding_rule, conv_general_permutations,
// _conv_general_dilated_shape_rule, padtype_to_pads).
//
//   * out_sharding given -> it is the result (nnx.Conv(out_sharding=...)).
//   * else allowed only if the kernel is fully replicated AND the lhs feature
//     dim ('C') is unsharded; the result then takes the lhs entries POSITION BY
//     POSITION (JAX reuses the operand sharding), under the varying-shape
//     divisibility check of slicing (name "conv_general_dilated").
//       NWC [16@x,128@y,8] . WIO [3,8,10] SAME -> [16@x,128@y,10]
//   * anything else: "Please specify the output sharding via `out_sharding`
//     parameter of `conv_general_dilated`".
//
// Dimension numbers are JAX's string form, e.g. ("NWC", "WIO", "NWC") or
// ("NCHW", "OIHW", "NCHW") (the default when not given). Padding: "SAME",
// "SAME_LOWER", "VALID" or one (low, high) pair per spatial dim.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_CONV_H_
#define MESHSERVE_COMMON_SHARDING_RULES_CONV_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

struct ConvParams {
  // lhs, rhs, out layout strings; empty: NC<spatial>, OI<spatial>, NC<spatial>.
  std::string lhs_spec, rhs_spec, out_spec;
  std::vector<int64_t> window_strides;  // empty: all 1
  std::string padding = "VALID";        // used when explicit_padding is empty
  std::vector<std::pair<int64_t, int64_t>> explicit_padding;
  std::vector<int64_t> lhs_dilation, rhs_dilation;  // empty: all 1
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};

// \error kInvalidArgument for malformed dimension numbers/padding, shape
//   mismatches, and the errors in the file comment.
absl::StatusOr<ArrayType> ConvGeneralDilatedRule(const ArrayType& lhs, const ArrayType& rhs,
                                                 const ConvParams& params,
                                                 const std::optional<PartitionSpec>& out_sharding);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_CONV_H_
