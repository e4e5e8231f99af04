// The safetensors of a Hugging Face model directory, as the importer
// (hf_import.h) sees them: only the headers are read (names, dtypes, shapes);
// the weights stay where they are and the model file points at them.
//
// A directory holds either `model.safetensors` or a sharded checkpoint,
// `model.safetensors.index.json` whose `weight_map` maps each tensor to a
// file in the same directory (the index wins when both exist, as in
// transformers' from_pretrained). Every file is opened and validated
// (common/tensor/safetensors.h); every tensor the index maps must be in the
// file it names.
//
// Errors: kNotFound naming the directory when it has neither file (and
// saying that pytorch_model.bin is not read); kInvalidArgument naming the
// index, the tensor and the file for a malformed index; the safetensors
// reader's errors prefixed with the file.
//
// Thread-safety: immutable after Open.
#ifndef MESHSERVE_CLIENT_HF_IMPORT_CHECKPOINT_H_
#define MESHSERVE_CLIENT_HF_IMPORT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"

namespace meshserve {
namespace client {

inline constexpr char kSafetensorsFile[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFile[] = "model.safetensors.index.json";

class HfCheckpoint {
 public:
  struct TensorInfo {
    std::string name;
    std::string file;  // its file's name inside the directory
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
  };

  static absl::StatusOr<HfCheckpoint> Open(absl::string_view hf_dir);

  // kSafetensorsFile or kSafetensorsIndexFile: what the model file's
  // `checkpoint` names (model-format.md accepts both).
  const std::string& entry_file() const { return entry_file_; }
  // The safetensors files read, in name order.
  const std::vector<std::string>& files() const { return files_; }
  // Every tensor by name.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* Find(absl::string_view name) const;

 private:
  std::string entry_file_;
  std::vector<std::string> files_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_HF_IMPORT_CHECKPOINT_H_
