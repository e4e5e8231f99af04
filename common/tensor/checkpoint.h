// A model's checkpoint: one or more safetensors files seen as one name ->
// tensor map (the model file's "checkpoint", docs/model-format.md):
//   - one path to a .safetensors file;
//   - one path to a Hugging Face model.safetensors.index.json, whose
//     "weight_map" maps each tensor name to a file in the index's folder;
//   - a list of .safetensors paths (a tensor may appear in only one).
// Open reads headers only (SafetensorsFile::Open); ReadBox reads only the
// box's bytes from the file that holds the tensor.
//
// Errors: kNotFound for a file that cannot be opened; kInvalidArgument for a
// malformed index (not an object, no weight_map, a non-string file, a file
// name with '/'), an index entry whose file lacks the tensor, or a tensor
// present in two files of a list. Messages name the path and the tensor.
//
// Thread-safety: immutable after Open; ReadBox may be called concurrently.
#ifndef MESHSERVE_COMMON_TENSOR_CHECKPOINT_H_
#define MESHSERVE_COMMON_TENSOR_CHECKPOINT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/safetensors.h"

namespace meshserve {

class Checkpoint {
 public:
  // `paths`: one .safetensors, one *.json index, or several .safetensors.
  // \error see the file comment; kInvalidArgument for an empty list.
  static absl::StatusOr<Checkpoint> Open(const std::vector<std::string>& paths);

  // The entry of `tensor` and the file holding it; nullptr when absent.
  const SafetensorsFile::Entry* Find(absl::string_view tensor) const;
  const SafetensorsFile* FileOf(absl::string_view tensor) const;

  // SafetensorsFile::ReadBox on the file holding `tensor` (kNotFound naming
  // the checkpoint when none does).
  absl::StatusOr<Tensor> ReadBox(absl::string_view tensor, const Box& box,
                                 std::optional<DType> out_dtype = std::nullopt) const;

  // The files opened, in the order read (an index's files by tensor name).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // "a.safetensors" or "index.json (3 files)", for messages.
  const std::string& description() const { return description_; }

 private:
  absl::Status AddFile(const std::string& path);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, const SafetensorsFile*> by_tensor_;
  std::string description_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_CHECKPOINT_H_
