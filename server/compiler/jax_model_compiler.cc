#include "server/compiler/jax_model_compiler.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/typed_model.h"
#include "common/sharding/visualize.h"
#include "server/compiler/compiler.h"

namespace meshserve {

absl::Status JaxModelCompiler::ValidateModel(const ModelFile& model) {
  return meshserve::ValidateModel(model);
}

absl::StatusOr<CompiledPlan> JaxModelCompiler::Compile(const CompileRequest& request) {
  const ModelFile& model = *request.model;
  const DeviceAssignment& placement = request.devices;
  MS_ASSIGN_OR_RETURN(TypedModel typed, TypeModel(model, placement.mesh, request.input_shapes,
                                                  request.out_shardings));
  CompileOptions options;
  options.program_id = request.program_id;
  options.generation = placement.generation;
  MS_ASSIGN_OR_RETURN(CompiledPlan plan, CompileModel(typed, placement.device_workers, options),
                      "compiling model '", model.name, "'");
  return plan;
}

namespace {

std::string KindOf(const ModelFile& model, const std::string& name) {
  if (model.FindInput(name)) return "input";
  if (model.FindParam(name)) return "param";
  for (const std::string& out : model.outputs) {
    if (out == name) return "output";
  }
  return "activation";
}

}  // namespace

absl::StatusOr<DescribeResult> JaxModelCompiler::Describe(const ModelFile& model,
                                                             const DeviceAssignment& placement,
                                                             const InputShapes& input_shapes) {
  InputShapes shapes = input_shapes;
  for (const InputDef& in : model.inputs) {
    if (shapes.count(in.name)) continue;
    std::vector<int64_t> dims = in.shape;
    for (int64_t& d : dims) {
      if (d == -1) d = NominalDimSize(model);
    }
    shapes[in.name] = dims;
  }
  MS_ASSIGN_OR_RETURN(TypedModel typed, TypeModel(model, placement.mesh, shapes));
  DescribeResult result;
  result.model = model.name;
  result.mesh = placement.mesh.ToString();
  std::vector<std::string> order;
  for (const InputDef& in : model.inputs) order.push_back(in.name);
  for (const ParamDef& p : model.params) order.push_back(p.name);
  for (const LayerDef& l : model.layers) order.push_back(l.name);
  for (const std::string& name : order) {
    const ArrayType* type = typed.Find(name);
    if (type == nullptr) continue;
    DescribeValue v;
    v.name = name;
    v.kind = KindOf(model, name);
    v.type_str = type->ToString();
    if (type->rank() >= 1 && type->rank() <= 2) {
      absl::StatusOr<std::string> vis = VisualizeSharding(type->shape, type->sharding);
      if (vis.ok()) v.visualization = *vis;
    }
    if (const LayerDef* layer = model.FindLayer(name)) v.layer_op = std::string(ModelOpName(layer->kind));
    result.values.push_back(std::move(v));
  }
  CompileOptions options;
  options.program_id = "describe";
  options.generation = placement.generation;
  MS_ASSIGN_OR_RETURN(CompiledPlan compiled,
                      CompileModel(typed, placement.device_workers, options),
                      "compiling model '", model.name, "'");
  for (const LayerPlanInfo& layer : compiled.layers) {
    for (const CollectiveInfo& c : layer.collectives) {
      result.collectives.push_back(
          {layer.layer, c.pattern,
           absl::StrCat(c.value, " (", c.purpose, ") ", c.from, " -> ", c.to), c.bytes});
    }
  }
  result.text = absl::StrCat(typed.ToString(), "\n", compiled.ToString());
  return result;
}

}  // namespace meshserve
