#include "client/hf_import_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/checkpoint.h"
#include "common/tensor/safetensors.h"

namespace meshserve {
namespace client {
namespace fs = std::filesystem;

absl::StatusOr<HfCheckpoint> HfCheckpoint::Open(absl::string_view hf_dir) {
  const fs::path dir{std::string(hf_dir)};
  HfCheckpoint ckpt;
  std::error_code ec;
  if (fs::exists(dir / kSafetensorsIndexFile, ec)) {
    ckpt.entry_file_ = kSafetensorsIndexFile;
  } else if (fs::exists(dir / kSafetensorsFile, ec)) {
    ckpt.entry_file_ = kSafetensorsFile;
  } else {
    std::string hint = fs::exists(dir / "pytorch_model.bin", ec)
                           ? " (pytorch_model.bin is not read: save the model as safetensors)"
                           : "";
    return NotFound("'", hf_dir, "' has no ", kSafetensorsFile, " and no ",
                    kSafetensorsIndexFile, hint);
  }
  // The server's own reader (index, weight_map checks, headers only): the
  // import sees exactly the tensors a worker will.
  MS_ASSIGN_OR_RETURN(Checkpoint files,
                      Checkpoint::Open({(dir / ckpt.entry_file_).string()}));
  for (const std::unique_ptr<SafetensorsFile>& f : files.files()) {
    const std::string file = fs::path(f->path()).filename().string();
    ckpt.files_.push_back(file);
    for (const SafetensorsFile::Entry& e : f->entries()) {
      if (files.FileOf(e.name) != f.get()) continue;  // not this file's in the weight_map
      ckpt.tensors_[e.name] = TensorInfo{e.name, file, e.dtype, e.shape};
    }
  }
  std::sort(ckpt.files_.begin(), ckpt.files_.end());
  return ckpt;
}

const HfCheckpoint::TensorInfo* HfCheckpoint::Find(absl::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace client
}  // namespace meshserve
