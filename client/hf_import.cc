#include "client/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli_format.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/model_file.h"
#include "common/model/typed_model.h"
#include "common/sharding/shard_layout.h"
#include "server/compiler/jax_model_compiler.h"
#include "server/coordinator/grpc/cluster_service.h"
#include "server/coordinator/placement.h"

namespace meshserve {
namespace client {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ModelName(const ImportOptions& options) {
  std::string name = options.name;
  if (name.empty()) {
    fs::path dir = fs::path(options.hf_dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();  // "dir/" -> "dir"
    name = dir.filename().string();
    if (name == "." || name == "..") name = fs::absolute(dir).lexically_normal().filename().string();
  }
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument("model name '", name, "' must be a plain file name (set --name)");
  }
  return name;
}

// `target` relative to `base` when both resolve, else absolute.
std::string RelativePath(const fs::path& target, const fs::path& base) {
  std::error_code ec;
  fs::path t = fs::weakly_canonical(fs::absolute(target), ec);
  fs::path b = fs::weakly_canonical(fs::absolute(base), ec);
  fs::path rel = t.lexically_relative(b);
  return rel.empty() ? t.string() : rel.string();
}

absl::Status WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Unavailable("cannot write '", path.string(), "'");
  return absl::OkStatus();
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The DescribeResponse with only inputs, params and outputs, each distinct
// type's grid once (a model's blocks repeat the same few).
DescribeResponse SummaryOnly(const DescribeResponse& full) {
  DescribeResponse out = full;
  out.clear_values();
  std::set<std::string> drawn;
  for (const DescribeResponse::Value& v : full.values()) {
    if (v.kind() == "activation") continue;
    DescribeResponse::Value* kept = out.add_values();
    *kept = v;
    if (!drawn.insert(v.type_str()).second) kept->clear_visualization();
  }
  return out;
}

// "# params: 124439808 (497.8 MB); on the fullest device 123.1 MB".
absl::StatusOr<std::string> ParamBytes(const ModelFile& model, const Mesh& mesh) {
  int64_t total = 0, elements = 0;
  std::vector<int64_t> per_device(mesh.num_devices(), 0);
  for (const ParamDef& p : model.params) {
    const int64_t size = DTypeSize(p.dtype);
    total += NumElements(p.shape) * size;
    elements += NumElements(p.shape);
    MS_ASSIGN_OR_RETURN(NamedSharding sharding,
                        NamedSharding::Create(mesh, p.sharding, static_cast<int>(p.shape.size())),
                        "param '", p.name, "'");
    for (int64_t d = 0; d < mesh.num_devices(); ++d) {
      per_device[d] += ShardBoxForDevice(p.shape, sharding, d).NumElements() * size;
    }
  }
  const int64_t fullest = *std::max_element(per_device.begin(), per_device.end());
  return absl::StrFormat("# params: %d elements, %.1f MB; %.1f MB on the fullest device\n",
                         elements, total / 1e6, fullest / 1e6);
}

// The tokenizer files a checkpoint may ship; the ones present are copied to
// NAME.tokenizer/ (a folder: the model repository reads only the *.json files
// directly in it as models).
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",          "vocab.json",        "merges.txt",
    "tokenizer_config.json",   "special_tokens_map.json", "tokenizer.model",
    "generation_config.json"};

// Copies the tokenizer files of `hf_dir` into `dir` (made when one exists);
// returns how many were copied.
absl::StatusOr<int> CopyTokenizerFiles(const fs::path& hf_dir, const fs::path& dir) {
  int copied = 0;
  for (const char* file : kTokenizerFiles) {
    std::error_code ec;
    if (!fs::is_regular_file(hf_dir / file, ec)) continue;
    fs::create_directories(dir, ec);
    if (ec) return Unavailable("cannot create '", dir.string(), "': ", ec.message());
    fs::copy_file(hf_dir / file, dir / file, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return Unavailable("cannot copy '", (hf_dir / file).string(), "' to '", dir.string(),
                         "': ", ec.message());
    }
    ++copied;
  }
  return copied;
}

// generation_config.json's eos_token_id, when present, replaces config.json's.
absl::Status ApplyGenerationConfig(const fs::path& hf_dir, LmConfig& config) {
  const fs::path path = hf_dir / "generation_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path.string()));
  MS_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> eos,
                      ParseGenerationConfigEos(text, path.string()));
  if (eos.has_value()) config.eos_token_ids = *std::move(eos);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LmModelFileText(const std::string& name, const LmConfig& config,
                                            const MeshAxes& mesh,
                                            const HfCheckpoint* checkpoint,
                                            const std::string& checkpoint_path,
                                            std::vector<std::string>* unused_tensors) {
  const bool gpt2 = config.arch == LmArch::kGpt2;
  LmModelBuilder b(config, PlanShardings(config, mesh), checkpoint,
                   {gpt2 ? "transformer." : "model."});
  MS_RETURN_IF_ERROR(gpt2 ? BuildGpt2Model(b) : BuildLlamaModel(b));
  Json names = Json::object();  // checkpoint_tied / _ignored, before params move out
  b.WriteCheckpointNames(names);
  Json root = Json::object();
  root["name"] = name;
  root["mesh"] = Json::object();
  for (const auto& [axis, size] : mesh) root["mesh"][axis] = size;
  root["dtype"] = "float32";
  root["seed"] = 0;
  if (checkpoint != nullptr) root["checkpoint"] = checkpoint_path;
  root["inputs"] = {{"input_ids",
                     {{"shape", {-1, -1}},
                      {"sharding", Json::array({b.BatchAxis(), nullptr})},
                      {"dtype", "int32"}}}};
  root["params"] = std::move(b.params());
  root["layers"] = std::move(b.layers());
  root["outputs"] = {"logits"};
  root["generation"] = {{"context_length", config.context_length},
                        {"eos_token_ids", config.eos_token_ids}};
  for (auto& [key, value] : names.items()) root[key] = std::move(value);
  if (unused_tensors != nullptr) *unused_tensors = b.UnusedTensors();
  return root.dump(1) + "\n";
}

absl::StatusOr<ImportResult> ImportHfModel(const ImportOptions& options) {
  ImportResult result;
  MS_ASSIGN_OR_RETURN(result.name, ModelName(options));
  const fs::path hf_dir(options.hf_dir), out_dir(options.out_dir);
  const std::string config_path = (hf_dir / "config.json").string();
  MS_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  MS_ASSIGN_OR_RETURN(result.config, ParseHfConfig(config_text, config_path));
  MS_RETURN_IF_ERROR(ApplyGenerationConfig(hf_dir, result.config));
  result.plan = PlanShardings(result.config, options.mesh);
  std::optional<HfCheckpoint> checkpoint;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Unavailable("cannot create '", options.out_dir, "': ", ec.message());
  if (!options.init_from_seed) {
    MS_ASSIGN_OR_RETURN(checkpoint, HfCheckpoint::Open(options.hf_dir));
    result.checkpoint = RelativePath(hf_dir / checkpoint->entry_file(), out_dir);
  }
  MS_ASSIGN_OR_RETURN(
      std::string text,
      LmModelFileText(result.name, result.config, options.mesh,
                      checkpoint.has_value() ? &*checkpoint : nullptr, result.checkpoint,
                      &result.unused_tensors));
  // The file must be one the server accepts: parse and type it as it will.
  MS_ASSIGN_OR_RETURN(ModelFile model, ParseModelFile(text, out_dir.string()),
                      "the imported model file");
  MS_RETURN_IF_ERROR(ValidateModel(model), "the imported model file");
  for (const ParamDef& p : model.params) result.num_params += NumElements(p.shape);
  result.model_path = (out_dir / (result.name + ".json")).string();
  MS_RETURN_IF_ERROR(WriteFile(result.model_path, text));
  MS_RETURN_IF_ERROR(
      CopyTokenizerFiles(hf_dir, out_dir / (result.name + ".tokenizer")).status());
  return result;
}

absl::StatusOr<std::string> DescribeImported(const ImportResult& result, int64_t num_workers) {
  MS_ASSIGN_OR_RETURN(ModelFile model, LoadModelFile(result.model_path));
  std::vector<PlacementWorker> workers;
  for (int64_t w = 0; w < num_workers; ++w) workers.push_back({w, ""});
  MS_ASSIGN_OR_RETURN(Placement placement, ComputePlacement(model, workers, 0));
  // One request of 128 tokens (fewer if GPT-2 has fewer positions), one
  // row per `data` device.
  int64_t batch = 1, seq = 128;
  if (std::optional<int> data = placement.mesh.AxisIndex("data")) {
    batch = placement.mesh.axis(*data).size;
  }
  if (result.config.max_positions > 0) seq = std::min(seq, result.config.max_positions);
  JaxModelCompiler compiler;
  MS_ASSIGN_OR_RETURN(DescribeResult described,
                      compiler.Describe(model, placement.Devices(), {{"input_ids", {batch, seq}}}));
  DescribeResponse proto;
  DescribeResultToProto(described, &proto);
  std::string out = absl::StrCat("# ", result.config.ToString(), "\n# placed on ", num_workers,
                                 " workers: ", placement.mesh.ToString(), ", input_ids [", batch,
                                 ", ", seq, "]\n");
  absl::StrAppend(&out, FormatDescribe(SummaryOnly(proto)));
  MS_ASSIGN_OR_RETURN(std::string bytes, ParamBytes(model, placement.mesh));
  absl::StrAppend(&out, bytes);
  absl::StrAppend(&out, "# checkpoint: ",
                  result.checkpoint.empty() ? "none (initialised from the seed)"
                                            : result.checkpoint,
                  "\n");
  if (!result.unused_tensors.empty()) {
    absl::StrAppend(&out, "# not read (no param uses them): ",
                    absl::StrJoin(result.unused_tensors, ", "), "\n");
  }
  return out;
}

}  // namespace client
}  // namespace meshserve
