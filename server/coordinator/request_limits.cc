#include "server/coordinator/request_limits.h"

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/shape_string.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::Status ValidateRequestLimits(const RequestLimits& limits) {
  if (limits.max_request_bytes <= 0) {
    return InvalidArgument("--max_request_bytes=", limits.max_request_bytes,
                           ": want a positive byte count");
  }
  if (limits.max_tensor_elements <= 0) {
    return InvalidArgument("--max_tensor_elements=", limits.max_tensor_elements,
                           ": want a positive element count");
  }
  return absl::OkStatus();
}

absl::Status CheckRequestLimits(const InferRequest& request, const RequestLimits& limits) {
  for (const NamedTensor& input : request.inputs) {
    int64_t elements = 1;
    bool overflow = false;
    for (int64_t d : input.shape) overflow |= !CheckedMul(elements, d < 0 ? 0 : d, &elements);
    if (overflow || elements > limits.max_tensor_elements) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", request.model, "' input '", input.name, "': ",
          overflow ? "more than 2^63" : absl::StrCat(elements), " elements (shape ",
          ShapeToString(input.shape), ") exceed --max_tensor_elements=",
          limits.max_tensor_elements));
    }
    if (static_cast<int64_t>(input.bytes.size()) > limits.max_request_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", request.model, "' input '", input.name, "': ", input.bytes.size(),
          " bytes exceed --max_request_bytes=", limits.max_request_bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshserve
