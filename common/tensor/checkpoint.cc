// Checkpoint (checkpoint.h).
#include "common/tensor/checkpoint.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

// weight_map of an index file: tensor -> file name (same folder).
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path), "checkpoint index");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("checkpoint index '", path, "' is not a JSON object");
  }
  auto it = j.find("weight_map");
  if (it == j.end() || !it->is_object()) {
    return InvalidArgument("checkpoint index '", path, "' has no object 'weight_map'");
  }
  std::map<std::string, std::string> map;
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e.value().is_string()) {
      return InvalidArgument("checkpoint index '", path, "': weight_map['", e.key(),
                             "'] is not a file name");
    }
    std::string file = e.value().get<std::string>();
    if (file.empty() || absl::StrContains(file, "/")) {
      return InvalidArgument("checkpoint index '", path, "': weight_map['", e.key(), "'] = '",
                             file, "' must be a file name in the index's folder");
    }
    map[e.key()] = std::move(file);
  }
  return map;
}

}  // namespace

absl::Status Checkpoint::AddFile(const std::string& path) {
  MS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("checkpoint: no files");
  Checkpoint c;
  if (paths.size() == 1 && absl::EndsWith(paths[0], ".json")) {
    MS_ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(paths[0]));
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [tensor, file] : weight_map) {
      const SafetensorsFile*& f = by_file[file];
      if (f == nullptr) {
        MS_RETURN_IF_ERROR(c.AddFile(absl::StrCat(DirOf(paths[0]), "/", file)),
                           "checkpoint index '", paths[0], "'");
        f = c.files_.back().get();
      }
      if (f->Find(tensor) == nullptr) {
        return InvalidArgument("checkpoint index '", paths[0], "' maps '", tensor, "' to ",
                               f->path(), ", which has no such tensor");
      }
      c.by_tensor_[tensor] = f;
    }
    c.description_ = absl::StrCat(paths[0], " (", c.files_.size(), " files)");
    return c;
  }
  for (const std::string& path : paths) {
    MS_RETURN_IF_ERROR(c.AddFile(path));
    const SafetensorsFile* f = c.files_.back().get();
    for (const SafetensorsFile::Entry& e : f->entries()) {
      auto [it, inserted] = c.by_tensor_.emplace(e.name, f);
      if (!inserted) {
        return InvalidArgument("checkpoint: tensor '", e.name, "' is in both ",
                               it->second->path(), " and ", path);
      }
    }
  }
  c.description_ = paths.size() == 1 ? paths[0] : absl::StrJoin(paths, ", ");
  return c;
}

const SafetensorsFile* Checkpoint::FileOf(absl::string_view tensor) const {
  auto it = by_tensor_.find(tensor);
  return it == by_tensor_.end() ? nullptr : it->second;
}

const SafetensorsFile::Entry* Checkpoint::Find(absl::string_view tensor) const {
  const SafetensorsFile* f = FileOf(tensor);
  return f == nullptr ? nullptr : f->Find(tensor);
}

absl::StatusOr<Tensor> Checkpoint::ReadBox(absl::string_view tensor, const Box& box,
                                           std::optional<DType> out_dtype) const {
  const SafetensorsFile* f = FileOf(tensor);
  if (f == nullptr) return NotFound("checkpoint ", description_, " has no tensor '", tensor, "'");
  return f->ReadBox(tensor, box, out_dtype);
}

}  // namespace meshserve
