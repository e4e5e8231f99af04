#include "client/hf_import_graph.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/safetensors.h"

namespace meshserve {
namespace client {
namespace {

// Tensors that are buffers, not parameters: GPT-2's causal-mask buffers and
// old Llama checkpoints' RoPE frequencies.
bool IsKnownBuffer(absl::string_view name) {
  return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias") ||
         absl::EndsWith(name, "rotary_emb.inv_freq");
}

}  // namespace

absl::StatusOr<MeshAxes> ParseMeshAxes(absl::string_view text) {
  MeshAxes axes;
  int num_flexible = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int64_t size = 0;
    if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &size) || (size < 1 && size != -1)) {
      return InvalidArgument("mesh '", text, "': '", part,
                             "' must be AXIS=N with N >= 1 or -1");
    }
    if (kv.first != "data" && kv.first != "model") {
      return InvalidArgument("mesh '", text, "': axis '", kv.first,
                             "' is not one the importer shards over (data, model)");
    }
    for (const auto& [name, unused] : axes) {
      if (name == kv.first) return InvalidArgument("mesh '", text, "': axis '", name, "' twice");
    }
    if (size == -1 && ++num_flexible > 1) {
      return InvalidArgument("mesh '", text, "': at most one axis may be -1");
    }
    axes.emplace_back(kv.first, size);
  }
  return axes;
}

LmShardPlan PlanShardings(const LmConfig& c, const MeshAxes& mesh) {
  LmShardPlan plan;
  int64_t n = 0;  // 0: no model axis
  for (const auto& [name, size] : mesh) {
    if (name == "data") plan.data = true;
    if (name == "model") n = size;
  }
  if (n == 0) return plan;
  auto divides = [n](int64_t dim) { return n == -1 || dim % n == 0; };
  plan.attn = divides(c.num_heads) && divides(c.num_kv_heads);
  plan.mlp = divides(c.intermediate);
  plan.vocab = n > 1 && c.vocab % n == 0;
  return plan;
}

LmModelBuilder::LmModelBuilder(const LmConfig& config, const LmShardPlan& plan,
                               const HfCheckpoint* checkpoint,
                               std::vector<std::string> prefixes)
    : config_(config), plan_(plan), checkpoint_(checkpoint), prefixes_(std::move(prefixes)) {}

std::string LmModelBuilder::CheckpointName(absl::string_view name) const {
  if (checkpoint_ == nullptr) return "";
  for (const std::string& prefix : prefixes_) {
    std::string full = absl::StrCat(prefix, name);
    if (checkpoint_->Find(full) != nullptr) return full;
  }
  return checkpoint_->Find(name) != nullptr ? std::string(name) : "";
}

Json LmModelBuilder::ModelAxis(bool on) const { return on ? Json("model") : Json(nullptr); }

Json LmModelBuilder::BatchAxis() const { return plan_.data ? Json("data") : Json(nullptr); }

absl::Status LmModelBuilder::Param(const std::string& name, std::vector<int64_t> shape,
                                   Json spec, const ParamSource& source,
                                   const ParamInit& init) {
  Json p = Json::object();
  p["shape"] = shape;
  p["sharding"] = std::move(spec);
  if (checkpoint_ == nullptr) {
    p["init"] = init.kind;
    if (init.kind == "normal") p["stddev"] = init.stddev;
    params_[name] = std::move(p);
    return absl::OkStatus();
  }
  const std::string found = CheckpointName(source.tensor);
  if (found.empty()) {
    std::vector<std::string> tried;
    for (const std::string& prefix : prefixes_) tried.push_back(prefix + source.tensor);
    tried.push_back(source.tensor);
    return NotFound("checkpoint ", checkpoint_->entry_file(), " has no tensor '",
                    absl::StrJoin(tried, "' or '"), "' (", config_.architecture,
                    " param '", name, "')");
  }
  const HfCheckpoint::TensorInfo& t = *checkpoint_->Find(found);
  if (t.shape != source.tensor_shape) {
    return InvalidArgument("tensor '", found, "' in ", t.file, " has shape ",
                           ShapeToString(t.shape), ", expected ",
                           ShapeToString(source.tensor_shape), " for ", config_.ToString());
  }
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kBFloat16 &&
      t.dtype != DType::kFloat16) {
    return InvalidArgument("tensor '", found, "' in ", t.file, " has dtype ",
                           SafetensorsDTypeName(t.dtype), " (supported: F32, BF16, F16)");
  }
  // No "dtype": BF16 and F16 tensors widen to float32 params when read, so
  // every activation and the logits are float32 (a bfloat16 param would make
  // the products bfloat16 under the typing rules).
  p["from"] = found;
  if (!source.offset.empty()) p["from_offset"] = source.offset;
  used_.insert(found);
  for (const std::string& prefix : prefixes_) tied_[prefix + source.tensor] = found;
  tied_[source.tensor] = found;
  params_[name] = std::move(p);
  return absl::OkStatus();
}

void LmModelBuilder::Layer(const std::string& name, const std::string& op, Json fields) {
  Json layer = Json::object();
  layer["name"] = name;
  layer["op"] = op;
  for (auto& [key, value] : fields.items()) layer[key] = std::move(value);
  layers_.push_back(std::move(layer));
}

absl::Status LmModelBuilder::TokenEmbedding(const std::string& layer, const std::string& table) {
  const std::vector<int64_t> shape = {config_.vocab, config_.hidden};
  MS_RETURN_IF_ERROR(Param(table, shape, Json::array({ModelAxis(plan_.vocab), nullptr}),
                           {table, shape, {}}, {"normal", config_.initializer_range}));
  Json fields = {{"input", "input_ids"}, {"table", table}};
  // A gather from a vocabulary-sharded table needs the result's sharding.
  if (plan_.vocab) fields["out_sharding"] = Json::array({BatchAxis(), nullptr, nullptr});
  Layer(layer, "embed", std::move(fields));
  return absl::OkStatus();
}

absl::Status LmModelBuilder::LmHead(const std::string& input, const std::string& tied_table) {
  const bool own_head = checkpoint_ != nullptr ? !CheckpointName("lm_head.weight").empty()
                                               : !config_.tie_word_embeddings;
  std::string head = tied_table;
  if (!own_head) tied_["lm_head.weight"] = tied_table;
  if (own_head) {
    head = "lm_head.weight";
    const std::vector<int64_t> shape = {config_.vocab, config_.hidden};
    MS_RETURN_IF_ERROR(Param(head, shape, Json::array({ModelAxis(plan_.vocab), nullptr}),
                             {head, shape, {}}, {"normal", config_.initializer_range}));
  }
  Json fields = {{"equation", "bsd,vd->bsv"}, {"inputs", {input, head}}};
  if (!plan_.vocab) {
    // A vocabulary that stays unsharded would run the whole head on every
    // worker (GPT-2's 40 GFLOP at 4 x 128 tokens): under auto_axes the compiler
    // splits it (jax.sharding.auto_axes), the logits laid out by batch.
    fields["auto_axes"] = true;
    fields["out_sharding"] = Json::array({BatchAxis(), nullptr, nullptr});
  }
  Layer("logits", "einsum", std::move(fields));
  return absl::OkStatus();
}

std::vector<std::string> LmModelBuilder::UnusedTensors() const {
  std::vector<std::string> out;
  if (checkpoint_ == nullptr) return out;
  for (const auto& [name, info] : checkpoint_->tensors()) {
    if (!used_.count(name) && !IsKnownBuffer(name)) out.push_back(name);
  }
  return out;
}


void LmModelBuilder::Buffer(const std::string& canonical) {
  buffers_.insert(canonical);
  for (const std::string& prefix : prefixes_) buffers_.insert(prefix + canonical);
}

void LmModelBuilder::WriteCheckpointNames(Json& root) const {
  auto read = [&](const std::string& name) {
    return params_.contains(name) || used_.count(name) > 0;
  };
  Json tied = Json::object();
  for (const auto& [name, twin] : tied_) {
    if (name != twin && !read(name)) tied[name] = twin;
  }
  std::set<std::string> ignored;
  for (const std::string& name : buffers_) {
    if (!read(name) && !tied.contains(name)) ignored.insert(name);
  }
  if (checkpoint_ != nullptr) {
    for (const auto& [name, info] : checkpoint_->tensors()) {
      if (!read(name) && !tied.contains(name)) ignored.insert(name);
    }
  }
  if (!tied.empty()) root["checkpoint_tied"] = std::move(tied);
  if (!ignored.empty()) root["checkpoint_ignored"] = ignored;
}

}  // namespace client
}  // namespace meshserve
