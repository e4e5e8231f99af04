// Umbrella header: every JAX explicit-sharding rule implemented here.
// See each header for the rule, its JAX source and examples; rule_util.h for
// the machinery they share.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_SHARDING_RULES_H_
#define MESHSERVE_COMMON_SHARDING_RULES_SHARDING_RULES_H_

#include "common/sharding/rules/concat_slice.h"
#include "common/sharding/rules/decode_ops.h"
#include "common/sharding/rules/conv.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/einsum.h"
#include "common/sharding/rules/elementwise.h"
#include "common/sharding/rules/gather.h"
#include "common/sharding/rules/layout_ops.h"
#include "common/sharding/rules/make_type.h"
#include "common/sharding/rules/model_ops.h"
#include "common/sharding/rules/reduce.h"
#include "common/sharding/rules/reshape.h"
#include "common/sharding/rules/reshard.h"
#include "common/sharding/rules/rule_util.h"

#endif  // MESHSERVE_COMMON_SHARDING_RULES_SHARDING_RULES_H_
