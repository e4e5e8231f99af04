// TypeModel / ValidateModel (typed_model.h).
#include "common/model/typed_model.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/sharding_rules.h"

namespace meshserve {
namespace {

absl::StatusOr<std::vector<int64_t>> FillInputShape(const InputDef& in,
                                                    const std::vector<int64_t>& given) {
  bool ok = given.size() == in.shape.size();
  for (size_t i = 0; ok && i < given.size(); ++i) {
    ok = given[i] >= 1 && (in.shape[i] == -1 || in.shape[i] == given[i]);
  }
  if (!ok) {
    return InvalidArgument("input '", in.name, "': request shape ", ShapeToCompactString(given),
                           " does not match ", ShapeToCompactString(in.shape));
  }
  return given;
}

// ONNX Reshape's 0 (the input's dim at the same position), then jnp.reshape's -1.
absl::StatusOr<std::vector<int64_t>> ResolveNewShape(const std::vector<int64_t>& from,
                                                     const std::vector<int64_t>& to) {
  int64_t total = 1, known = 1;
  int minus = -1;
  for (int64_t d : from) total *= d;
  std::vector<int64_t> out = to;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == 0) {
      if (i >= from.size()) {
        return InvalidArgument("reshape shape ", ShapeToCompactString(to), ": dim ", i,
                               " is 0 (copy the input's dim) but the input ",
                               ShapeToCompactString(from), " has rank ", from.size());
      }
      out[i] = from[i];
    }
    if (to[i] == -1) {
      minus = static_cast<int>(i);
    } else {
      known *= out[i];
    }
  }
  if (minus >= 0) {
    if (known == 0 || total % known != 0) {
      return InvalidArgument("cannot reshape ", ShapeToCompactString(from), " into ", ShapeToCompactString(to));
    }
    out[minus] = total / known;
  }
  return out;
}

struct Operands {
  std::vector<ArrayType> args;  // in the op's order
};

// The rule of `layer`'s op on `args` with `out` as the op's own out_sharding
// (nullopt for ops that take none).
absl::StatusOr<ArrayType> ApplyRule(const LayerDef& layer, const TypedModel& tm,
                                    absl::Span<const ArrayType> args,
                                    const std::optional<PartitionSpec>& out) {
  const absl::string_view name = ModelOpName(layer.kind);
  auto param = [&](const std::string& param_name) -> std::optional<ArrayType> {
    if (param_name.empty()) return std::nullopt;
    return tm.TypeOf(param_name);
  };
  switch (layer.kind) {
    case ModelOp::kLinear:
      return LinearRule(args[0], args[1], param(layer.bias), out);
    case ModelOp::kEinsum: {
      MS_ASSIGN_OR_RETURN(ArrayType y, EinsumRule(layer.equation, args[0], args[1], out));
      if (layer.bias.empty()) return y;
      return AddBiasRule(name, y, tm.TypeOf(layer.bias));
    }
    case ModelOp::kEmbed:
      return EmbedRule(args[0], args[1], out);
    case ModelOp::kRmsNorm:
    case ModelOp::kLayerNorm:
      return NormRule(name, args[0], param(layer.scale), param(layer.bias));
    case ModelOp::kSoftmax: {
      int64_t rank = args[0].rank();
      if (layer.axis < -rank || layer.axis >= rank) {
        return InvalidArgument("softmax axis ", layer.axis, " is out of range for rank ", rank);
      }
      return MaskedSoftmaxRule(args[0], param(layer.where), layer.causal);
    }
    case ModelOp::kPositions:
      return PositionsRule(args[0], layer.axis);
    case ModelOp::kRope:
      return RopeRule(args[0], layer.seq_axis);
    case ModelOp::kRelu:
    case ModelOp::kGelu:
    case ModelOp::kSilu:
    case ModelOp::kTanh:
      return ActivationRule(name, args[0]);
    case ModelOp::kAdd:
    case ModelOp::kMul:
      return ElementwiseRule(name, args);
    case ModelOp::kReshape: {
      MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          ResolveNewShape(args[0].shape, layer.shape));
      return ReshapeRule(args[0], shape, out);
    }
    case ModelOp::kTranspose:
      return TransposeRule(args[0], layer.perm);
    case ModelOp::kReshard:
      return ReshardRule(args[0], out);
    case ModelOp::kAttention:
      return AttentionRule(args[0], args[1], args[2]);
    case ModelOp::kSelectRows:
      return SelectRowsRule(args[0], layer.rows);
    case ModelOp::kSample:
      return SampleRule(args[0], layer.vocab_size);
  }
  return Internal("op ", static_cast<int>(layer.kind), " has no sharding rule");
}

absl::StatusOr<ArrayType> TypeLayer(const LayerDef& layer, const TypedModel& tm,
                                    const std::optional<PartitionSpec>& out_sharding) {
  std::vector<ArrayType> args;
  for (const std::string& in : layer.inputs) args.push_back(tm.TypeOf(in));
  if (layer.kind == ModelOp::kLinear) args.push_back(tm.TypeOf(layer.kernel));
  if (layer.kind == ModelOp::kEmbed) args.push_back(tm.TypeOf(layer.table));
  if (layer.auto_axes) {
    auto inner = [&](absl::Span<const ArrayType> a) {
      return ApplyRule(layer, tm, a, std::nullopt);
    };
    return AutoAxesRule(args, out_sharding, std::nullopt, inner);
  }
  if (ModelOpTakesOutSharding(layer.kind)) return ApplyRule(layer, tm, args, out_sharding);
  MS_ASSIGN_OR_RETURN(ArrayType result, ApplyRule(layer, tm, args, std::nullopt));
  if (out_sharding.has_value()) return ReshardRule(result, out_sharding);
  return result;
}

}  // namespace

const ArrayType* TypedModel::Find(absl::string_view name) const {
  auto it = types.find(std::string(name));
  return it == types.end() ? nullptr : &it->second;
}

const ArrayType& TypedModel::TypeOf(absl::string_view name) const {
  const ArrayType* t = Find(name);
  MS_CHECK(t != nullptr) << "value '" << name << "' was not typed";  // callers typed it
  return *t;
}

std::string TypedModel::ToString() const {
  std::string out;
  auto line = [&](const std::string& name) {
    if (const ArrayType* t = Find(name)) absl::StrAppend(&out, name, ": ", t->ToString(), "\n");
  };
  for (const InputDef& in : model.inputs) line(in.name);
  for (const ParamDef& p : model.params) line(p.name);
  for (const LayerDef& l : model.layers) line(l.name);
  return out;
}

absl::StatusOr<TypedModel> TypeModel(
    const ModelFile& model, const Mesh& mesh,
    const std::map<std::string, std::vector<int64_t>>& input_shapes,
    const std::map<std::string, PartitionSpec>& out_shardings) {
  TypedModel tm;
  tm.model = model;
  tm.mesh = mesh;
  for (const auto& [name, spec] : out_shardings) {
    bool is_output = false;
    for (const std::string& o : model.outputs) is_output |= (o == name);
    if (!is_output || model.FindLayer(name) == nullptr) {
      return InvalidArgument("out_sharding override for '", name,
                             "': not an output computed by a layer");
    }
  }
  for (const InputDef& in : model.inputs) {
    auto it = input_shapes.find(in.name);
    if (it == input_shapes.end()) {
      return InvalidArgument("input '", in.name, "': missing from the request");
    }
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, FillInputShape(in, it->second));
    MS_ASSIGN_OR_RETURN(tm.types[in.name], MakeTypeRule(in.dtype, shape, mesh, in.sharding),
                        "input '", in.name, "'");
  }
  for (const auto& [name, shape] : input_shapes) {
    if (model.FindInput(name) == nullptr) {
      return InvalidArgument("input '", name, "' is not an input of model '", model.name, "'");
    }
  }
  for (const ParamDef& p : model.params) {
    MS_ASSIGN_OR_RETURN(tm.types[p.name], MakeTypeRule(p.dtype, p.shape, mesh, p.sharding),
                        "param '", p.name, "'");
  }
  for (const LayerDef& layer : model.layers) {
    std::optional<PartitionSpec> out = layer.out_sharding;
    auto it = out_shardings.find(layer.name);
    if (it != out_shardings.end()) out = it->second;
    tm.layer_out_shardings[layer.name] = out;
    MS_ASSIGN_OR_RETURN(ArrayType t, TypeLayer(layer, tm, out), "layer '", layer.name, "'");
    tm.types[layer.name] = std::move(t);
  }
  return tm;
}

int64_t NominalDimSize(const ModelFile& model) {
  int64_t n = 1;
  for (const auto& axis : model.mesh_axes) n *= axis.second > 0 ? axis.second : 1;
  return n;
}

absl::Status CheckModelTypesOn(const ModelFile& model, const Mesh& mesh) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const InputDef& in : model.inputs) {
    std::vector<int64_t> shape = in.shape;
    for (int64_t& d : shape) {
      if (d == -1) d = mesh.num_devices();
    }
    shapes[in.name] = std::move(shape);
  }
  return TypeModel(model, mesh, shapes).status();
}

absl::Status ValidateModel(const ModelFile& model) {
  // The resolved mesh has NominalDimSize devices (a -1 axis as 1).
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(model, NominalDimSize(model)));
  MS_RETURN_IF_ERROR(CheckModelTypesOn(model, mesh), "model '", model.name, "'");
  return absl::OkStatus();
}

}  // namespace meshserve
