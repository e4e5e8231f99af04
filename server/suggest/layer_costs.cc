// The suggest prediction decomposed by layer and memoized (layer_costs.h).
#include "server/suggest/layer_costs.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/compiler/compiler.h"
#include "server/suggest/layout_space.h"

namespace meshserve {
namespace {

// The spec with the mesh's size-1 axes left out, as text.
std::string EffectiveSpec(const PartitionSpec& spec, const Mesh& mesh) {
  auto big = [&](const std::string& axis) {
    for (const MeshAxis& m : mesh.axes()) {
      if (m.name == axis) return m.size > 1;
    }
    return true;
  };
  std::string out;
  for (const PartitionSpec::Entry& e : spec.entries()) {
    for (const std::string& a : e) {
      if (big(a)) absl::StrAppend(&out, a, ",");
    }
    out += "|";
  }
  out += "U";
  for (const std::string& a : spec.unreduced()) {
    if (big(a)) absl::StrAppend(&out, a, ",");
  }
  return out;
}

std::string TypeText(const ArrayType& t) { return absl::StrCat(t.ToString(), t.spec().ToString()); }

}  // namespace

std::vector<std::string> LayerOperands(const LayerDef& l) {
  std::vector<std::string> names = l.inputs;
  for (const std::string* p : {&l.kernel, &l.table, &l.scale, &l.bias, &l.where}) {
    if (!p->empty()) names.push_back(*p);
  }
  return names;
}

double LayerTerms::Ms(const CostFigures& f, int64_t num_devices) const {
  return HostSlowdown(f, num_devices) * compute_ms +
         static_cast<double>(bytes) / (static_cast<double>(num_devices) * f.link_bytes_per_s) *
             1e3 +
         static_cast<double>(rounds) * f.hop_ms;
}

std::string TypesKeyOf(const TypedModel& typed) {
  std::string key = typed.mesh.ToString();
  for (const auto& [name, t] : typed.types) {
    std::string dims;
    for (int64_t d : t.shape) absl::StrAppend(&dims, d, ",");
    absl::StrAppend(&key, ";", name, ":", dims, "/", EffectiveSpec(t.spec(), typed.mesh));
  }
  return key;
}

absl::StatusOr<LayerTerms> LayerCostCache::CompileOne(const TypedModel& typed,
                                                      const LayerDef* layer,
                                                      const std::string& gathered) {
  TypedModel sub;
  sub.mesh = typed.mesh;
  sub.model.name = typed.model.name;
  sub.model.mesh_axes = typed.model.mesh_axes;
  std::vector<std::string> values = layer != nullptr ? LayerOperands(*layer)
                                                     : std::vector<std::string>{gathered};
  for (const std::string& v : values) {
    const ArrayType* t = typed.Find(v);
    if (t == nullptr) return Internal("value '", v, "' untyped");
    sub.types[v] = *t;
    if (const ParamDef* p = typed.model.FindParam(v)) {
      if (sub.model.FindParam(v) == nullptr) sub.model.params.push_back(*p);
    } else if (sub.model.FindInput(v) == nullptr) {
      sub.model.inputs.push_back(InputDef{v, t->shape, t->spec(), t->dtype});
    }
  }
  if (layer != nullptr) {
    sub.model.layers.push_back(*layer);
    sub.types[layer->name] = typed.TypeOf(layer->name);
    auto it = typed.layer_out_shardings.find(layer->name);
    if (it != typed.layer_out_shardings.end()) sub.layer_out_shardings[layer->name] = it->second;
  } else {
    sub.model.outputs.push_back(gathered);
  }
  std::vector<int64_t> workers(typed.mesh.num_devices());
  std::iota(workers.begin(), workers.end(), 0);
  ++num_compiles_;
  MS_ASSIGN_OR_RETURN(CompiledPlan plan, CompileModel(sub, workers, CompileOptionsFor(figures_)));
  LayerTerms terms;
  for (const LayerPlanInfo& info : plan.layers) {
    for (const CollectiveInfo& c : info.collectives) terms.rounds += c.rounds;
    terms.bytes += info.bytes_moved;
    terms.compute_ms += LayerComputeMs(info, sub.Find(info.layer), figures_);
  }
  return terms;
}

absl::StatusOr<LayerTerms> LayerCostCache::Layer(const TypedModel& typed, const LayerDef& layer) {
  std::string key = absl::StrCat(typed.mesh.ToString(), "#", RoleKey(layer.name), "=",
                                 TypeText(typed.TypeOf(layer.name)));
  for (const std::string& v : LayerOperands(layer)) {
    const ArrayType* t = typed.Find(v);
    absl::StrAppend(&key, "#", RoleKey(v), ":", t != nullptr ? TypeText(*t) : "?");
  }
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  MS_ASSIGN_OR_RETURN(LayerTerms terms, CompileOne(typed, &layer, ""));
  cache_.emplace(std::move(key), terms);
  return terms;
}

absl::StatusOr<LayerTerms> LayerCostCache::Gather(const TypedModel& typed,
                                                  const std::string& name) {
  const ArrayType* t = typed.Find(name);
  if (t == nullptr) return Internal("output '", name, "' untyped");
  if (t->spec().unreduced().empty()) return LayerTerms{};
  const std::string key = absl::StrCat(typed.mesh.ToString(), "#(out)", TypeText(*t));
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  MS_ASSIGN_OR_RETURN(LayerTerms terms, CompileOne(typed, nullptr, name));
  cache_.emplace(key, terms);
  return terms;
}

absl::StatusOr<Prediction> LayerCostCache::Predict(const ModelFile& model, const Mesh& mesh,
                                                   const ShapeSet& shapes) {
  MS_ASSIGN_OR_RETURN(TypedModel typed, TypeModel(model, mesh, shapes));
  Prediction p;
  p.param_bytes_per_worker = ParamBytesPerDevice(typed);
  p.types_key = TypesKeyOf(typed);
  LayerTerms sum;
  auto add = [&sum](const LayerTerms& t) {
    sum.compute_ms += t.compute_ms;
    sum.bytes += t.bytes;
    sum.rounds += t.rounds;
  };
  for (const LayerDef& l : model.layers) {
    MS_ASSIGN_OR_RETURN(LayerTerms t, Layer(typed, l), "layer '", l.name, "'");
    add(t);
  }
  for (const std::string& out : model.outputs) {
    MS_ASSIGN_OR_RETURN(LayerTerms t, Gather(typed, out));
    add(t);
    add(LayerTerms{0, typed.TypeOf(out).NumBytes(), 0});  // gathered to the coordinator
  }
  for (const auto& [name, dims] : shapes) {
    if (const ArrayType* t = typed.Find(name)) add(LayerTerms{0, t->NumBytes(), 0});
  }
  const int64_t n = mesh.num_devices();
  const double slowdown = HostSlowdown(figures_, n);
  p.rounds = sum.rounds;
  p.bytes_per_request = sum.bytes;
  p.gemm_ms = slowdown * sum.compute_ms;
  p.network_ms = LayerTerms{0, sum.bytes, sum.rounds}.Ms(figures_, n);
  p.memory_ms = slowdown * 1e3 * static_cast<double>(p.param_bytes_per_worker) /
                figures_.memory_bytes_per_s;
  p.predicted_ms = p.gemm_ms + p.network_ms + p.memory_ms + figures_.request_overhead_ms;
  return p;
}

}  // namespace meshserve
