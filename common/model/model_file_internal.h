// The parts of model_file.cc that the layer parser (model_file_layers.cc)
// shares with it. Internal to ms_model.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_MODEL_MODEL_FILE_INTERNAL_H_
#define MESHSERVE_COMMON_MODEL_MODEL_FILE_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json/json_util.h"
#include "common/model/model_file.h"

namespace meshserve {
namespace model_file_internal {

// A list of integers; each >= 1, or -1 where `allow_minus_one`.
absl::StatusOr<std::vector<int64_t>> GetShape(const Json& j, absl::string_view what,
                                              bool allow_minus_one);

// A spec (sharding_json.h grammar) whose axes are the model's; unreduced
// axes only where `allow_unreduced` (out_sharding).
absl::StatusOr<PartitionSpec> GetSpec(const Json& j, const ModelFile& model,
                                      absl::string_view what, bool allow_unreduced);

// The "layers" field into m.layers (inputs and params already parsed).
absl::Status ParseLayers(const Json& root, ModelFile& m);

}  // namespace model_file_internal
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_MODEL_MODEL_FILE_INTERNAL_H_
