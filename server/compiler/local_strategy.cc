// The non-dot strategies (strategy.h): elementwise, unary, norms, softmax,
// reshape, transpose, embed, reshard.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/compiler/layer_strategy.h"

namespace meshserve {
namespace {

using Entries = std::vector<PartitionSpec::Entry>;

Entries EntriesOf(const NamedSharding& s, int rank) {
  Entries e;
  for (int i = 0; i < rank; ++i) e.push_back(s.spec().entry(i));
  return e;
}

ComputeStepIr Op(ComputeOp op, std::vector<std::string> inputs) {
  ComputeStepIr s;
  s.op = op;
  s.inputs = std::move(inputs);
  return s;
}

absl::Status RequireReducedResult(const LayerContext& ctx) {
  if (!ctx.result.spec().unreduced().empty()) {
    return Unimplemented("op '", ModelOpName(ctx.layer->kind), "' with an unreduced result ",
                         ctx.result.ToString());
  }
  return absl::OkStatus();
}

// Computes `op` over the inputs laid out as `layout`s into `compute` (the
// compute layout of the result), then lays it out as the typed result.
absl::StatusOr<Placed> ComputeThenPlace(const LayerContext& ctx, const NamedSharding& compute,
                                        std::vector<std::pair<int, NamedSharding>> layouts,
                                        ComputeStepIr step, absl::string_view strategy) {
  ProgramEmitter& em = *ctx.emitter;
  ctx.info->strategy = std::string(strategy);
  step.inputs.clear();
  for (const auto& [index, layout] : layouts) {
    const Placed& in = ctx.operands[index];
    MS_ASSIGN_OR_RETURN(Placed placed, em.Reshard(in, layout, in.dtype, ctx.operand_names[index],
                                                  "operand", ctx.info));
    step.inputs.push_back(placed.buffer);
  }
  Placed out{em.NewBuffer(ctx.layer->name), ctx.result.shape, compute,
             compute.spec().unreduced().empty() ? ctx.result.dtype : DType::kFloat32};
  em.ComputeEverywhere(out, [&](int64_t) { return step; });
  return em.Reshard(out, ctx.result.sharding, ctx.result.dtype, ctx.layer->name, "result",
                    ctx.info);
}

// The layout of operand `in` broadcast (numpy rules) against a result laid
// out as `result`: its broadcast dims unsharded, the others as the result's.
NamedSharding BroadcastLayout(const Mesh& mesh, const Placed& in, const NamedSharding& result,
                              const std::vector<int64_t>& result_shape,
                              const std::vector<std::string>& unreduced = {}) {
  const int rank = static_cast<int>(result_shape.size());
  const int r = static_cast<int>(in.shape.size());
  Entries e;
  for (int j = 0; j < r; ++j) {
    int rd = j + rank - r;
    bool broadcast = in.shape[j] == 1 && result_shape[rd] != 1;
    e.push_back(broadcast ? PartitionSpec::Entry{} : result.spec().entry(rd));
  }
  return ShardingOf(mesh, r, e, unreduced);
}

// add or mul (`op`).
absl::StatusOr<Placed> Elementwise(const LayerContext& ctx, ComputeOp op) {
  // add is linear: partial sums over the same unreduced axes add locally
  // (the result stays unreduced). Other ops need reduced operands.
  const std::vector<std::string>& unreduced = ctx.result.spec().unreduced();
  if (op != ComputeOp::kAdd) MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  std::vector<std::pair<int, NamedSharding>> layouts;
  for (int k = 0; k < 2; ++k) {
    layouts.emplace_back(k, BroadcastLayout(ctx.emitter->mesh(), ctx.operands[k],
                                            ctx.result.sharding, ctx.result.shape, unreduced));
  }
  return ComputeThenPlace(ctx, ctx.result.sharding, layouts, Op(op, {}),
                          "elementwise in the result's layout");
}

// relu, gelu, silu or tanh (`op`).
absl::StatusOr<Placed> Unary(const LayerContext& ctx, ComputeOp op) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  return ComputeThenPlace(ctx, ctx.result.sharding, {{0, ctx.result.sharding}}, Op(op, {}),
                          "elementwise in the result's layout");
}

// The result's layout with dim `axis` unsharded.
NamedSharding WithDimGathered(const LayerContext& ctx, int axis) {
  Entries e = EntriesOf(ctx.result.sharding, ctx.result.rank());
  e[axis].clear();
  return ShardingOf(ctx.emitter->mesh(), ctx.result.rank(), e);
}

// rms_norm (x, scale) or layer_norm (x, scale, bias) (`op`).
absl::StatusOr<Placed> Norm(const LayerContext& ctx, ComputeOp op) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  const int last = ctx.result.rank() - 1;
  NamedSharding compute = WithDimGathered(ctx, last);
  NamedSharding replicated1 = ShardingOf(ctx.emitter->mesh(), 1, {{}});
  std::vector<std::pair<int, NamedSharding>> layouts = {{0, compute}, {1, replicated1}};
  if (op == ComputeOp::kLayerNorm) layouts.emplace_back(2, replicated1);
  ComputeStepIr step = Op(op, {});
  step.epsilon = static_cast<float>(ctx.layer->epsilon);
  return ComputeThenPlace(ctx, compute, layouts, step, "normalised dim gathered, local");
}

// softmax (scale, causal) or softmax_where (the mask laid out as x,
// broadcast dims unsharded); the causal mask needs no layout (global indices
// come from each device's out_box).
absl::StatusOr<Placed> Softmax(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  const int rank = ctx.result.rank();
  int axis = static_cast<int>(ctx.layer->axis < 0 ? ctx.layer->axis + rank : ctx.layer->axis);
  NamedSharding compute = WithDimGathered(ctx, axis);
  const bool where = !ctx.layer->where.empty();
  ComputeStepIr step = Op(where ? ComputeOp::kSoftmaxWhere : ComputeOp::kSoftmax, {});
  step.softmax_axis = axis;
  step.scale = static_cast<float>(ctx.layer->softmax_scale);
  step.causal = ctx.layer->causal;
  std::vector<std::pair<int, NamedSharding>> layouts = {{0, compute}};
  if (where) {
    layouts.emplace_back(
        1, BroadcastLayout(ctx.emitter->mesh(), ctx.operands[1], compute, ctx.result.shape));
  }
  return ComputeThenPlace(ctx, compute, layouts, step, "softmax axis gathered, local");
}

// positions: no operand data; each device writes its box's global indices.
absl::StatusOr<Placed> Positions(const LayerContext& ctx) {
  const int rank = ctx.result.rank();
  ComputeStepIr step = Op(ComputeOp::kPositions, {});
  step.positions_axis = ctx.layer->axis < 0 ? ctx.layer->axis + rank : ctx.layer->axis;
  return ComputeThenPlace(ctx, ctx.result.sharding, {}, step, "local iota (global offsets)");
}

// rope: in the result's layout (the last dim is unsharded by the rule); the
// position is the global index along seq_axis.
absl::StatusOr<Placed> Rope(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  const int rank = ctx.result.rank();
  ComputeStepIr step = Op(ComputeOp::kRope, {});
  const int64_t seq_axis = ctx.layer->seq_axis;
  step.rope_seq_axis = seq_axis < 0 ? seq_axis + rank : seq_axis;
  step.theta = ctx.layer->theta;
  return ComputeThenPlace(ctx, ctx.result.sharding, {{0, ctx.result.sharding}}, step,
                          "rotary, local (global positions)");
}

// True when the row-major elements of `box` (inside `shape`) restricted to
// dims [b, e) form one contiguous flat range; sets [begin, end).
bool FlatRange(const Box& box, const std::vector<int64_t>& shape, int b, int e, int64_t& begin,
               int64_t& end) {
  int p = b;
  while (p < e && box[p].size() == 1) ++p;
  for (int i = p + 1; i < e; ++i) {
    if (box[i].begin != 0 || box[i].end != shape[i]) return false;
  }
  begin = 0;
  int64_t stride_end = 1;
  for (int i = b; i < e; ++i) begin = begin * shape[i] + box[i].begin;
  int64_t len = 1;
  for (int i = p; i < e; ++i) len *= box[i].size();
  (void)stride_end;
  end = begin + len;
  // begin above is the flat index of the box's first element; the box is
  // contiguous so it ends len elements later.
  return true;
}

// Whether every device's operand box maps element for element onto its
// result box under the reshape (groups of dims with equal products).
bool ReshapeIsLocal(const Placed& in, const Placed& out, int64_t num_devices) {
  const auto& a = in.shape;
  const auto& b = out.shape;
  std::vector<std::pair<std::pair<int, int>, std::pair<int, int>>> groups;
  int i = 0, j = 0;
  while (i < static_cast<int>(a.size()) || j < static_cast<int>(b.size())) {
    int i0 = i, j0 = j;
    int64_t pa = 1, pb = 1;
    if (i < static_cast<int>(a.size())) pa = a[i++];
    if (j < static_cast<int>(b.size())) pb = b[j++];
    while (pa != pb) {
      if (pa < pb && i < static_cast<int>(a.size())) {
        pa *= a[i++];
      } else if (j < static_cast<int>(b.size())) {
        pb *= b[j++];
      } else {
        return false;
      }
    }
    groups.push_back({{i0, i}, {j0, j}});
  }
  for (int64_t d = 0; d < num_devices; ++d) {
    Box ib = in.BoxFor(d), ob = out.BoxFor(d);
    if (ib.IsEmpty() != ob.IsEmpty()) return false;
    for (const auto& g : groups) {
      int64_t b1, e1, b2, e2;
      if (!FlatRange(ib, a, g.first.first, g.first.second, b1, e1)) return false;
      if (!FlatRange(ob, b, g.second.first, g.second.second, b2, e2)) return false;
      if (b1 != b2 || e1 != e2) return false;
    }
  }
  return true;
}

absl::StatusOr<Placed> Reshape(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  ProgramEmitter& em = *ctx.emitter;
  const Placed& in = ctx.operands[0];
  Placed reduced_in = in;
  reduced_in.sharding = Reduced(in.sharding);
  Placed typed_out{"", ctx.result.shape, ctx.result.sharding, ctx.result.dtype};
  if (ReshapeIsLocal(reduced_in, typed_out, em.num_devices())) {
    return ComputeThenPlace(ctx, ctx.result.sharding, {{0, reduced_in.sharding}},
                            Op(ComputeOp::kReshape, {}), "local reshape");
  }
  NamedSharding in_full = ShardingOf(em.mesh(), in.shape.size(), {});
  NamedSharding out_full = ShardingOf(em.mesh(), ctx.result.rank(), {});
  return ComputeThenPlace(ctx, out_full, {{0, in_full}}, Op(ComputeOp::kReshape, {}),
                          "gather, reshape, slice");
}

absl::StatusOr<Placed> Transpose(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  const Placed& in = ctx.operands[0];
  const int rank = static_cast<int>(in.shape.size());
  Entries in_e = EntriesOf(in.sharding, rank), out_e;
  for (int64_t p : ctx.layer->perm) out_e.push_back(in_e[p]);
  NamedSharding compute = ShardingOf(ctx.emitter->mesh(), rank, out_e);
  ComputeStepIr step = Op(ComputeOp::kTranspose, {});
  step.perm = ctx.layer->perm;
  return ComputeThenPlace(ctx, compute, {{0, Reduced(in.sharding)}}, step, "local transpose");
}

absl::StatusOr<Placed> Embed(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  ProgramEmitter& em = *ctx.emitter;
  const Placed& ids = ctx.operands[0];
  const Placed& table = ctx.operands[1];
  const int rank = ctx.result.rank();
  Entries out_e = EntriesOf(ctx.result.sharding, rank);
  std::vector<std::string> used;
  for (const auto& e : out_e) used.insert(used.end(), e.begin(), e.end());
  PartitionSpec::Entry vocab;
  for (const std::string& a : table.sharding.spec().entry(0)) {
    if (std::find(used.begin(), used.end(), a) == used.end()) vocab.push_back(a);
  }
  Entries ids_e(out_e.begin(), out_e.end() - 1);
  NamedSharding ids_layout = ShardingOf(em.mesh(), ids.shape.size(), ids_e);
  NamedSharding table_layout = ShardingOf(em.mesh(), 2, {vocab, out_e.back()});
  NamedSharding compute = ShardingOf(em.mesh(), rank, out_e, vocab);
  ctx.info->strategy = vocab.empty() ? "local gather" : "vocab-sharded gather, partial sums";
  MS_ASSIGN_OR_RETURN(Placed ids_c, em.Reshard(ids, ids_layout, ids.dtype, ctx.operand_names[0],
                                               "operand", ctx.info));
  MS_ASSIGN_OR_RETURN(Placed table_c, em.Reshard(table, table_layout, table.dtype,
                                                 ctx.operand_names[1], "operand", ctx.info));
  Placed out{em.NewBuffer(ctx.layer->name), ctx.result.shape, compute,
             vocab.empty() ? ctx.result.dtype : DType::kFloat32};
  ComputeStepIr embed = Op(ComputeOp::kEmbed, {ids_c.buffer, table_c.buffer});
  embed.vocab_size = table.shape[0];
  em.ComputeEverywhere(out, [&](int64_t) { return embed; });
  return em.Reshard(out, ctx.result.sharding, ctx.result.dtype, ctx.layer->name, "result",
                    ctx.info);
}

// attention: local on the typed layouts (the rule admits only layouts where
// each device holds whole kv-head groups of its batch rows, every position).
absl::StatusOr<Placed> Attention(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  ComputeStepIr step = Op(ComputeOp::kAttention, {});
  step.attention_scale = static_cast<float>(ctx.layer->attention_scale);
  step.cache_layer = ctx.cache_layer;
  step.num_cache_layers = ctx.num_cache_layers;
  std::vector<std::pair<int, NamedSharding>> layouts;
  for (int i = 0; i < 3; ++i) layouts.emplace_back(i, Reduced(ctx.operands[i].sharding));
  return ComputeThenPlace(ctx, ctx.result.sharding, layouts, step,
                          "local per head group (KV cache in generation)");
}

// select_rows: local (the row dim is unsharded by the rule).
absl::StatusOr<Placed> SelectRows(const LayerContext& ctx) {
  MS_RETURN_IF_ERROR(RequireReducedResult(ctx));
  return ComputeThenPlace(ctx, ctx.result.sharding, {{0, Reduced(ctx.operands[0].sharding)}},
                          Op(ComputeOp::kSelectRows, {}), "local row gather");
}

// sample: the vocabulary gathered, then every device samples its rows (the
// same records wherever a row is replicated: the draws are counter-based).
absl::StatusOr<Placed> Sample(const LayerContext& ctx) {
  const Placed& logits = ctx.operands[0];
  Entries e = EntriesOf(Reduced(logits.sharding), 3);
  e[2].clear();
  NamedSharding gathered = ShardingOf(ctx.emitter->mesh(), 3, e);
  ComputeStepIr step = Op(ComputeOp::kSample, {});
  step.vocab_size = ctx.layer->vocab_size;
  return ComputeThenPlace(ctx, ctx.result.sharding, {{0, gathered}}, step,
                          "vocabulary gathered, sampled per row");
}

}  // namespace

// No default: -Wswitch names a model op without a case.
absl::StatusOr<Placed> CompileLocalLayer(const LayerContext& ctx) {
  switch (ctx.layer->kind) {
    case ModelOp::kAdd: return Elementwise(ctx, ComputeOp::kAdd);
    case ModelOp::kMul: return Elementwise(ctx, ComputeOp::kMul);
    case ModelOp::kRelu: return Unary(ctx, ComputeOp::kRelu);
    case ModelOp::kGelu: return Unary(ctx, ComputeOp::kGelu);
    case ModelOp::kSilu: return Unary(ctx, ComputeOp::kSilu);
    case ModelOp::kTanh: return Unary(ctx, ComputeOp::kTanh);
    case ModelOp::kRmsNorm: return Norm(ctx, ComputeOp::kRmsNorm);
    case ModelOp::kLayerNorm: return Norm(ctx, ComputeOp::kLayerNorm);
    case ModelOp::kSoftmax: return Softmax(ctx);
    case ModelOp::kReshape: return Reshape(ctx);
    case ModelOp::kTranspose: return Transpose(ctx);
    case ModelOp::kEmbed: return Embed(ctx);
    case ModelOp::kPositions: return Positions(ctx);
    case ModelOp::kRope: return Rope(ctx);
    case ModelOp::kAttention: return Attention(ctx);
    case ModelOp::kSelectRows: return SelectRows(ctx);
    case ModelOp::kSample: return Sample(ctx);
    case ModelOp::kReshard:
      ctx.info->strategy = "reshard plan";
      return ctx.emitter->Reshard(ctx.operands[0], ctx.result.sharding, ctx.result.dtype,
                                  ctx.layer->name, "result", ctx.info);
    case ModelOp::kLinear:
    case ModelOp::kEinsum:
      break;  // dot strategy (CompileDotLayer)
  }
  return Unimplemented("op '", ModelOpName(ctx.layer->kind), "' has no local strategy");
}

}  // namespace meshserve
