#include "common/program/compute_op.h"

#include "common/base/status_util.h"

namespace meshserve {

absl::string_view ComputeOpName(ComputeOp op) {
  switch (op) {
#define MS_COMPUTE_OP_NAME(enumerator, name, arity) \
  case ComputeOp::enumerator:                      \
    return name;
    MS_COMPUTE_OP_LIST(MS_COMPUTE_OP_NAME)
#undef MS_COMPUTE_OP_NAME
  }
  return "?";
}

absl::StatusOr<ComputeOp> ParseComputeOp(absl::string_view name) {
#define MS_COMPUTE_OP_PARSE(enumerator, op_name, arity) \
  if (name == op_name) return ComputeOp::enumerator;
  MS_COMPUTE_OP_LIST(MS_COMPUTE_OP_PARSE)
#undef MS_COMPUTE_OP_PARSE
  return InvalidArgument("unknown compute op '", name, "'");
}

int ComputeOpArity(ComputeOp op) {
  switch (op) {
#define MS_COMPUTE_OP_ARITY(enumerator, name, arity) \
  case ComputeOp::enumerator:                       \
    return arity;
    MS_COMPUTE_OP_LIST(MS_COMPUTE_OP_ARITY)
#undef MS_COMPUTE_OP_ARITY
  }
  return 0;
}

}  // namespace meshserve
