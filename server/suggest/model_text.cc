// SuggestedModelText (suggest.h): the original model file's JSON with the
// suggestion's mesh sizes and shardings written in, checkpoints re-rooted.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"
#include "common/json/sharding_json.h"
#include "server/suggest/suggest.h"

namespace meshserve {
namespace {

// `path` relative to `out_dir` (absolute when out_dir is empty).
std::string PathFrom(const std::string& path, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  if (ec) return path;
  if (out_dir.empty()) return abs.string();
  const fs::path base = fs::absolute(out_dir, ec).lexically_normal();
  if (ec) return abs.string();
  const fs::path rel = abs.lexically_relative(base);
  return rel.empty() ? abs.string() : rel.string();
}

}  // namespace

absl::StatusOr<std::string> SuggestedModelText(const ModelFile& original,
                                               const Suggestion& suggestion,
                                               const std::string& out_dir) {
  Json root = Json::parse(original.json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgument("model '", original.name, "': its text is not a JSON object");
  }
  const ModelFile& m = suggestion.model;
  Json mesh = Json::object();
  for (const auto& [axis, size] : m.mesh_axes) mesh[axis] = size;
  root["mesh"] = mesh;
  for (const InputDef& in : m.inputs) {
    root["inputs"][in.name]["sharding"] = PartitionSpecToJson(in.sharding);
  }
  for (const ParamDef& p : m.params) {
    root["params"][p.name]["sharding"] = PartitionSpecToJson(p.sharding);
  }
  if (root.contains("layers") && root["layers"].is_array()) {
    for (Json& layer : root["layers"]) {
      if (!layer.contains("name") || !layer["name"].is_string()) continue;
      const LayerDef* l = m.FindLayer(layer["name"].get<std::string>());
      if (l == nullptr) continue;
      if (l->out_sharding.has_value()) {
        layer["out_sharding"] = PartitionSpecToJson(*l->out_sharding);
      } else {
        layer.erase("out_sharding");
      }
    }
  }
  if (!original.checkpoints.empty()) {
    Json paths = Json::array();
    for (const std::string& c : original.checkpoints) paths.push_back(PathFrom(c, out_dir));
    root["checkpoint"] = paths.size() == 1 ? paths[0] : paths;
  }
  return root.dump(1) + "\n";
}

}  // namespace meshserve
