// libFuzzer target: the model file (common/model): ParseModelFile on
// arbitrary text, then ValidateModel (typing every layer with the sharding
// rules on the model's own mesh), as the coordinator does when it loads a file.
// Invariants: never crashes; an error is a Status (kInvalidArgument for a bad
// file); a file that parses keeps its text and has a name.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/model_file.h"
#include "common/model/typed_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<meshserve::ModelFile> model =
      meshserve::ParseModelFile(text, "/nonexistent-model-dir");
  if (!model.ok()) {
    if (model.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  if (model->json_text != text || model->name.empty()) __builtin_trap();
  (void)meshserve::ValidateModel(*model);
  return 0;
}
