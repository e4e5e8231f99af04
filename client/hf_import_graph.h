// Writing a language model as a meshserve model file (docs/import.md): the
// Megatron-style sharding choices for a mesh, and a builder that adds params
// (read from a Hugging Face checkpoint, or initialised from the seed) and
// layers. BuildGpt2Model and BuildLlamaModel (hf_import_gpt2.cc,
// hf_import_llama.cc) write each architecture's layers with it.
//
// Shardings (LmShardPlan), for a mesh whose `model` axis has size N (-1: the
// axis takes the most workers on which the model types):
//   attention heads over `model` when N is -1 or divides both the query and
//     the KV head counts (q/k/v columns, o_proj rows; the heads dim of every
//     attention activation);
//   MLP columns over `model` when N is -1 or divides the MLP width (up/gate/
//     c_fc columns, down/c_proj rows); the two row-sharded products reduce
//     with an out_sharding that replicates d_model (Megatron's all-reduce);
//   the vocabulary (embedding table and LM head rows) over `model` only when
//     N is fixed, > 1, and divides it: under -1 it would shrink the axis to
//     the vocabulary's divisors (GPT-2's 50257 = 29 x 1733);
//   the batch dim over `data` when the mesh has that axis.
// A dim not sharded stays replicated; under -1 the coordinator shrinks the
// axis until every sharded dim divides it (12 heads on 8 workers: 6).
//
// Thread-safety: single-threaded builder.
#ifndef MESHSERVE_CLIENT_HF_IMPORT_GRAPH_H_
#define MESHSERVE_CLIENT_HF_IMPORT_GRAPH_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/hf_import_checkpoint.h"
#include "client/hf_import_config.h"
#include "common/json/json_util.h"

namespace meshserve {
namespace client {

// Mesh axes in order; one size may be -1.
using MeshAxes = std::vector<std::pair<std::string, int64_t>>;

// Parses "data=2,model=4" / "model=-1". Axis names must be `data` or `model`
// (the two the importer shards over), each once; sizes >= 1 or -1, at most
// one -1. \error kInvalidArgument naming the text and the offending entry.
absl::StatusOr<MeshAxes> ParseMeshAxes(absl::string_view text);

struct LmShardPlan {
  bool data = false;   // batch over `data`
  bool attn = false;   // heads over `model`
  bool mlp = false;    // MLP columns over `model`
  bool vocab = false;  // vocabulary rows over `model`
};

LmShardPlan PlanShardings(const LmConfig& config, const MeshAxes& mesh);

// How a param is made without a checkpoint (jax.nn.initializers names).
struct ParamInit {
  std::string kind;  // "normal", "ones", "zeros"
  double stddev = 0;
};

// Where a param comes from in the checkpoint: the box [offset, offset +
// shape) of tensor `tensor` (its name without the architecture's prefix),
// whose whole shape must be `tensor_shape`. Empty offset: zeros.
struct ParamSource {
  std::string tensor;
  std::vector<int64_t> tensor_shape;
  std::vector<int64_t> offset;
};

class LmModelBuilder {
 public:
  // `checkpoint` null: every param is initialised. `prefixes`: the names a
  // checkpoint tensor may carry before its canonical name ("transformer.").
  LmModelBuilder(const LmConfig& config, const LmShardPlan& plan,
                 const HfCheckpoint* checkpoint, std::vector<std::string> prefixes);

  const LmConfig& config() const { return config_; }
  const LmShardPlan& plan() const { return plan_; }
  bool has_checkpoint() const { return checkpoint_ != nullptr; }
  // The checkpoint's name of canonical tensor `name` (a prefixed or the bare
  // name), or "" when the checkpoint lacks it (or there is none).
  std::string CheckpointName(absl::string_view name) const;

  // `model` when `on`, else null; `data` when the plan shards the batch.
  Json ModelAxis(bool on) const;
  Json BatchAxis() const;

  // Adds param `name` of `shape` and PartitionSpec `spec` (a JSON list).
  // With a checkpoint: read from `source` (checked: present, whole shape,
  // dtype F32, BF16 or F16, widened to a float32 param); without:
  // initialised by `init`.
  // \error kNotFound naming the tensor (and its prefixed names) when the
  //   checkpoint lacks it; kInvalidArgument naming the tensor for a wrong
  //   shape or dtype.
  absl::Status Param(const std::string& name, std::vector<int64_t> shape, Json spec,
                     const ParamSource& source, const ParamInit& init);
  // Adds a layer: {"name": name, "op": op, ...fields}.
  void Layer(const std::string& name, const std::string& op, Json fields);

  // The shared ends of both architectures. A [vocab, d] table param `table`
  // (vocabulary rows over `model` when the plan says so), and the layer
  // `layer` = embed(input_ids, table), replicating d.
  absl::Status TokenEmbedding(const std::string& layer, const std::string& table);
  // `logits` = einsum("bsd,vd->bsv", input, head): head is lm_head.weight
  // when the checkpoint has it (initialised: when the embeddings are not
  // tied), else `tied_table`.
  absl::Status LmHead(const std::string& input, const std::string& tied_table);

  // The checkpoint's tensors no param reads, except known buffers (GPT-2's
  // attn.bias / attn.masked_bias, rotary_emb.inv_freq).
  std::vector<std::string> UnusedTensors() const;

  // A buffer the architecture's checkpoints and state_dicts may carry
  // (GPT-2's h.N.attn.bias), by its canonical name: checkpoint_ignored.
  void Buffer(const std::string& canonical);
  // The model file's checkpoint_tied and checkpoint_ignored (model_file.h),
  // so a whole checkpoint or state_dict pushes and pulls by name:
  //   tied: lm_head.weight -> the table when the head is tied; every other
  //     spelling of a tensor a param reads (with or without the prefix: the
  //     file's names are the checkpoint's, a state_dict's may differ) -> it;
  //   ignored: every spelling of each Buffer, and the checkpoint's tensors no
  //     param reads.
  // A name that is a param or a tensor a param reads is left out of both.
  void WriteCheckpointNames(Json& root) const;

  Json& params() { return params_; }
  Json& layers() { return layers_; }

 private:
  const LmConfig& config_;
  LmShardPlan plan_;
  const HfCheckpoint* checkpoint_;
  std::vector<std::string> prefixes_;
  std::set<std::string> used_;
  std::map<std::string, std::string> tied_;  // name -> twin
  std::set<std::string> buffers_;            // every spelling
  Json params_ = Json::object();
  Json layers_ = Json::array();
};

// The params and layers of each architecture (names: docs/import.md).
absl::Status BuildGpt2Model(LmModelBuilder& b);
absl::Status BuildLlamaModel(LmModelBuilder& b);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_HF_IMPORT_GRAPH_H_
