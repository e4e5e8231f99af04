// InspectLm and DecodeVariant (decode_model.h).
#include "server/compiler/decode_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

bool IsIntegerInput(const InputDef& in) {
  return (in.dtype == DType::kInt32 || in.dtype == DType::kInt64) && in.shape.size() == 2;
}

// The LM head's vocabulary: an einsum "bsd,vd->bsv" over a table param [V, d]
// or a linear over a kernel [d, V]; 0 when `head` is neither.
int64_t HeadVocab(const ModelFile& m, const LayerDef& head) {
  if (head.kind == ModelOp::kLinear) {
    const ParamDef* kernel = m.FindParam(head.kernel);
    return kernel != nullptr && kernel->shape.size() == 2 ? kernel->shape[1] : 0;
  }
  if (head.kind == ModelOp::kEinsum && head.inputs.size() == 2) {
    const ParamDef* table = m.FindParam(head.inputs[1]);
    const std::string& eq = head.equation;
    const std::string rhs = eq.substr(eq.find(',') + 1, eq.find("->") - eq.find(',') - 1);
    if (table != nullptr && table->shape.size() == 2 && rhs.size() == 2 &&
        eq.substr(eq.find("->") + 2).back() == rhs.front()) {
      return table->shape[0];
    }
  }
  return 0;
}

// The rows of the table that `positions` layers feed (GPT-2's wpe), or 0.
int64_t PositionTableRows(const ModelFile& m) {
  for (const LayerDef& l : m.layers) {
    if (l.kind != ModelOp::kEmbed || l.inputs.empty()) continue;
    const LayerDef* src = m.FindLayer(l.inputs[0]);
    const ParamDef* table = m.FindParam(l.table);
    if (src != nullptr && src->kind == ModelOp::kPositions && table != nullptr) {
      return table->shape[0];
    }
  }
  return 0;
}

// `spec` without the axes of `drop` in dim 0.
PartitionSpec WithoutBatchAxes(const PartitionSpec& spec, const PartitionSpec::Entry& drop) {
  std::vector<PartitionSpec::Entry> entries = spec.entries();
  if (!entries.empty()) {
    PartitionSpec::Entry kept;
    for (const std::string& a : entries[0]) {
      if (std::find(drop.begin(), drop.end(), a) == drop.end()) kept.push_back(a);
    }
    entries[0] = std::move(kept);
  }
  return PartitionSpec(std::move(entries), spec.unreduced());
}

// The head's contracted dim: the table's features (einsum) or the kernel's
// rows (linear).
int64_t HeadFeatures(const ModelFile& m, const LayerDef& head) {
  const ParamDef* p = m.FindParam(head.kind == ModelOp::kLinear ? head.kernel : head.inputs[1]);
  return head.kind == ModelOp::kLinear ? p->shape[0] : p->shape[1];
}

// Lays the head out so that each device reads 1/W of it (W = the devices of
// the mesh axes of size > 1): its vocabulary slice when W divides the
// vocabulary, else its features' slice (partial logits, unreduced over those
// axes; sample's gather reduces them). Unchanged on one device or when
// neither dim divides.
void ShardHead(const Mesh& mesh, int64_t vocab_size, int64_t features, LayerDef* head) {
  PartitionSpec::Entry axes;
  int64_t num_shards = 1;
  for (const MeshAxis& a : mesh.axes()) {
    if (a.size <= 1) continue;
    axes.push_back(a.name);
    num_shards *= a.size;
  }
  if (num_shards == 1) return;
  if (vocab_size % num_shards == 0) {
    head->out_sharding = PartitionSpec({{}, {}, axes});
  } else if (features % num_shards == 0) {
    head->out_sharding = PartitionSpec({{}, {}, {}}, axes);
  } else {
    return;
  }
  head->auto_axes = true;
}

}  // namespace

absl::StatusOr<LmShape> InspectLm(const ModelFile& m) {
  LmShape lm;
  const auto refuse = [&](const auto&... why) {
    return FailedPrecondition("model '", m.name, "' cannot generate: ", why...);
  };
  if (m.inputs.size() != 1 || !IsIntegerInput(m.inputs[0])) {
    return refuse("it needs one integer input [batch, seq] of token ids");
  }
  lm.input = m.inputs[0].name;
  const LayerDef* head = m.outputs.size() == 1 ? m.FindLayer(m.outputs[0]) : nullptr;
  lm.vocab_size = head != nullptr ? HeadVocab(m, *head) : 0;
  if (lm.vocab_size == 0) {
    return refuse("its one output must be an LM head (einsum 'bsd,vd->bsv' or linear)");
  }
  for (const LayerDef& l : m.layers) {
    lm.num_attention_layers += l.kind == ModelOp::kAttention;
    if (l.kind == ModelOp::kSoftmax && l.causal) {
      return refuse("layer '", l.name,
                    "' builds attention from einsums and a causal softmax, which cannot read a "
                    "KV cache (import the checkpoint again: the importer writes `attention`)");
    }
  }
  if (lm.num_attention_layers == 0) return refuse("it has no attention layer");
  lm.context_length = m.context_length > 0 ? m.context_length : PositionTableRows(m);
  return lm;
}

absl::StatusOr<ModelFile> DecodeVariant(const ModelFile& model, int64_t token_slots,
                                        int64_t rows, const Mesh* mesh) {
  MS_ASSIGN_OR_RETURN(LmShape lm, InspectLm(model));
  if (token_slots < 1 || rows < 1 || rows > token_slots) {
    return InvalidArgument("decode variant of '", model.name, "': ", rows, " rows of ",
                           token_slots, " token slots");
  }
  ModelFile m = model;
  const PartitionSpec::Entry batch = m.inputs[0].sharding.entry(0);
  m.inputs[0].shape = {1, token_slots};
  m.inputs[0].sharding = PartitionSpec();
  for (LayerDef& l : m.layers) {
    if (l.out_sharding.has_value()) l.out_sharding = WithoutBatchAxes(*l.out_sharding, batch);
  }
  const std::string head_name = m.outputs[0];
  auto head = std::find_if(m.layers.begin(), m.layers.end(),
                           [&](const LayerDef& l) { return l.name == head_name; });
  LayerDef rows_layer;
  rows_layer.name = "decode.rows";
  rows_layer.kind = ModelOp::kSelectRows;
  rows_layer.inputs = {head->inputs[0]};
  rows_layer.rows = rows;
  head->inputs[0] = rows_layer.name;
  if (mesh != nullptr) ShardHead(*mesh, lm.vocab_size, HeadFeatures(m, *head), &*head);
  m.layers.insert(head, std::move(rows_layer));
  LayerDef sample;
  sample.name = kDecodeOutput;
  sample.kind = ModelOp::kSample;
  sample.inputs = {head_name};
  sample.vocab_size = lm.vocab_size;
  m.layers.push_back(std::move(sample));
  m.outputs = {kDecodeOutput};
  m.batching.reset();
  return m;
}

}  // namespace meshserve
