// CompileModel (compiler.h): the driver. Lays out inputs and params as typed,
// compiles each layer with its strategy (strategy.h), frees values after their
// last use, and gathers the outputs (one replica per box).
#include "server/compiler/compiler.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/shard_layout.h"
#include "server/compiler/program_emitter.h"
#include "server/compiler/layer_strategy.h"
#include "server/compiler/param_only.h"

namespace meshserve {
namespace {

std::vector<std::string> OperandNames(const LayerDef& l) {
  std::vector<std::string> names = l.inputs;
  for (const std::string* p : {&l.kernel, &l.table, &l.scale, &l.bias, &l.where}) {
    if (!p->empty()) names.push_back(*p);
  }
  return names;
}

Placed PlacedOf(const std::string& buffer, const ArrayType& t) {
  return Placed{buffer, t.shape, t.sharding, t.spec().unreduced().empty() ? t.dtype
                                                                          : DType::kFloat32};
}

// Index of the last layer reading each value (outputs: past the end).
std::map<std::string, size_t> LastUses(const ModelFile& m) {
  std::map<std::string, size_t> last;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    for (const std::string& n : OperandNames(m.layers[i])) last[n] = i;
  }
  for (const std::string& o : m.outputs) last[o] = m.layers.size();
  return last;
}

class Compiler {
 public:
  Compiler(const TypedModel& typed, const std::vector<int64_t>& device_workers,
           const CompileOptions& options)
      : typed_(typed), em_(typed.mesh, device_workers, options.program_id) {
    em_.set_reshard_options(options.reshard);
  }

  absl::StatusOr<CompiledPlan> Run(const CompileOptions& options) {
    const ModelFile& m = typed_.model;
    out_.program_id = options.program_id;
    out_.generation = options.generation;
    for (const InputDef& in : m.inputs) {
      values_[in.name] = PlacedOf(InputBuffer(in.name), typed_.TypeOf(in.name));
      for (int64_t d = 0; d < em_.num_devices(); ++d) {
        Box box = values_[in.name].BoxFor(d);
        out_.input_slices.push_back({in.name, em_.WorkerOf(d), d, box});
      }
    }
    for (const ParamDef& p : m.params) {
      values_[p.name] = PlacedOf(ParamBuffer(p.name), typed_.TypeOf(p.name));
    }
    std::map<std::string, size_t> last = LastUses(m);
    for (const LayerDef& l : m.layers) num_cache_layers_ += l.kind == ModelOp::kAttention;
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const LayerDef& layer = m.layers[i];
      MS_RETURN_IF_ERROR(CompileLayer(layer), "layer '", layer.name, "'");
      for (const std::string& n : OperandNames(layer)) {
        if (last[n] == i && m.FindParam(n) == nullptr) Release(n);
      }
    }
    MS_RETURN_IF_ERROR(GatherOutputs());
    out_.programs = em_.TakePrograms();
    for (auto& [worker, program] : out_.programs) {
      program.model = m.name;
      program.generation = options.generation;
    }
    for (const LayerPlanInfo& l : out_.layers) out_.bytes_moved += l.bytes_moved;
    // Every plan carries its marks: the runtime decides per request whether a
    // run fills or uses the param cache, never whether a plan supports it.
    MarkParamOnlySteps(&out_);
    return std::move(out_);
  }

 private:
  absl::Status CompileLayer(const LayerDef& layer) {
    LayerContext ctx;
    ctx.emitter = &em_;
    ctx.layer = &layer;
    ctx.result = typed_.TypeOf(layer.name);
    ctx.operand_names = OperandNames(layer);
    for (const std::string& n : ctx.operand_names) ctx.operands.push_back(values_.at(n));
    if (layer.kind == ModelOp::kAttention) {
      ctx.cache_layer = next_cache_layer_++;
      ctx.num_cache_layers = num_cache_layers_;
    }
    LayerPlanInfo info;
    info.layer = layer.name;
    info.op = layer.kind;
    info.type = ctx.result.ToString();
    ctx.info = &info;
    MS_ASSIGN_OR_RETURN(Placed result,
                        ModelOpIsDot(layer.kind) ? CompileDotLayer(ctx) : CompileLocalLayer(ctx));
    if (!(result.sharding == ctx.result.sharding)) {
      return Internal("strategy produced ", result.sharding.spec().ToString(), " for ",
                      ctx.result.ToString());
    }
    std::vector<std::string> keep;
    for (const auto& [name, v] : values_) keep.push_back(v.buffer);
    keep.push_back(result.buffer);
    em_.FreeTemporaries(keep);
    values_[layer.name] = result;
    out_.layers.push_back(std::move(info));
    return absl::OkStatus();
  }

  // Frees the value's buffer unless a live value (or a param) shares it.
  void Release(const std::string& name) {
    auto it = values_.find(name);
    if (it == values_.end()) return;
    std::string buffer = it->second.buffer;
    values_.erase(it);
    if (IsParamBuffer(buffer)) return;
    for (const auto& [n, v] : values_) {
      if (v.buffer == buffer) return;
    }
    em_.Free(buffer);
  }

  absl::Status GatherOutputs() {
    LayerPlanInfo info;
    info.layer = "(outputs)";  // op: nullopt, the outputs' gather
    info.strategy = "one replica per box";
    for (const std::string& name : typed_.model.outputs) {
      const ArrayType* type = typed_.Find(name);
      if (type == nullptr) {
        return Internal("model '", typed_.model.name, "': output '", name, "' untyped");
      }
      out_.outputs.push_back({name, type->dtype, type->shape, type->ToString(), type->spec()});
      Placed v = values_.at(name);
      if (v.partial()) {
        MS_ASSIGN_OR_RETURN(v, em_.Reshard(v, Reduced(v.sharding), type->dtype, name, "output",
                                           &info));
      }
      for (const std::vector<int64_t>& group : ReplicaGroups(v.sharding)) {
        int64_t d = group.front();
        Box box = v.BoxFor(d);
        if (box.IsEmpty()) continue;
        em_.AddOutput(d, v.buffer, box, name);
        out_.output_pieces.push_back({name, em_.WorkerOf(d), d, box});
      }
    }
    if (!info.collectives.empty()) out_.layers.push_back(std::move(info));
    return absl::OkStatus();
  }

  const TypedModel& typed_;
  ProgramEmitter em_;
  std::map<std::string, Placed> values_;
  CompiledPlan out_;
  int64_t num_cache_layers_ = 0;  // the model's attention layers
  int64_t next_cache_layer_ = 0;
};

}  // namespace

absl::StatusOr<CompiledPlan> CompileModel(const TypedModel& typed,
                                          const std::vector<int64_t>& device_workers,
                                          const CompileOptions& options) {
  if (static_cast<int64_t>(device_workers.size()) != typed.mesh.num_devices()) {
    return InvalidArgument("device_workers has ", device_workers.size(), " entries for ",
                           typed.mesh.ToString(), " (", typed.mesh.num_devices(), " devices)");
  }
  for (int64_t w : device_workers) {
    if (w < 0) return InvalidArgument("device_workers has a negative worker id ", w);
  }
  Compiler compiler(typed, device_workers, options);
  return compiler.Run(options);
}

}  // namespace meshserve
