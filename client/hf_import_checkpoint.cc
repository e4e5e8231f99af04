#include "client/hf_import_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"
#include "common/tensor/safetensors.h"

namespace meshserve {
namespace client {
namespace {

namespace fs = std::filesystem;

// file -> tensors of the index's weight_map, checked to be plain file names.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ReadIndex(
    const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  absl::StatusOr<Json> root = ParseJsonText(text);
  if (!root.ok()) return InvalidArgument(path, ": broken JSON: ", root.status().message());
  MS_ASSIGN_OR_RETURN(const Json* map, RequiredJsonField(*root, "weight_map", "index"), path);
  if (!map->is_object() || map->empty()) {
    return InvalidArgument(path, ": weight_map must be a non-empty object, got ",
                           ShowJson(*map));
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file_json] : map->items()) {
    MS_ASSIGN_OR_RETURN(std::string file,
                        JsonString(file_json, absl::StrCat("weight_map['", tensor, "']")),
                        path);
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return InvalidArgument(path, ": weight_map['", tensor, "'] = '", file,
                             "' must name a file in the same directory");
    }
    by_file[file].push_back(tensor);
  }
  return by_file;
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(absl::string_view path) {
  std::ifstream in{std::string(path), std::ios::binary};
  if (!in) return NotFound("cannot read '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<HfCheckpoint> HfCheckpoint::Open(absl::string_view hf_dir) {
  const fs::path dir{std::string(hf_dir)};
  HfCheckpoint ckpt;
  std::map<std::string, std::vector<std::string>> wanted;  // file -> tensors; empty: all
  std::error_code ec;
  if (fs::exists(dir / kSafetensorsIndexFile, ec)) {
    ckpt.entry_file_ = kSafetensorsIndexFile;
    MS_ASSIGN_OR_RETURN(wanted, ReadIndex((dir / kSafetensorsIndexFile).string()));
  } else if (fs::exists(dir / kSafetensorsFile, ec)) {
    ckpt.entry_file_ = kSafetensorsFile;
    wanted[kSafetensorsFile] = {};
  } else {
    std::string hint = fs::exists(dir / "pytorch_model.bin", ec)
                           ? " (pytorch_model.bin is not read: save the model as safetensors)"
                           : "";
    return NotFound("'", hf_dir, "' has no ", kSafetensorsFile, " and no ",
                    kSafetensorsIndexFile, hint);
  }
  for (const auto& entry : wanted) {
    // Not a structured binding: C++17 lambdas cannot capture one (clang refuses).
    const std::string& file = entry.first;
    const auto& names = entry.second;
    const std::string path = (dir / file).string();
    MS_ASSIGN_OR_RETURN(SafetensorsFile st, SafetensorsFile::Open(path));
    ckpt.files_.push_back(file);
    auto add = [&](const SafetensorsFile::Entry& e) {
      ckpt.tensors_[e.name] = TensorInfo{e.name, file, e.dtype, e.shape};
    };
    if (names.empty()) {
      for (const SafetensorsFile::Entry& e : st.entries()) add(e);
      continue;
    }
    for (const std::string& name : names) {
      const SafetensorsFile::Entry* e = st.Find(name);
      if (e == nullptr) {
        return InvalidArgument(kSafetensorsIndexFile, ": weight_map puts tensor '", name,
                               "' in '", file, "', which does not hold it");
      }
      add(*e);
    }
  }
  return ckpt;
}

const HfCheckpoint::TensorInfo* HfCheckpoint::Find(absl::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace client
}  // namespace meshserve
