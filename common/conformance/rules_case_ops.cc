// Op dispatch for the conformance cases: params (JSON) -> rule call.
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/conformance/rules_case_decode.h"
#include "common/model/model_op.h"
#include "common/sharding/rules/sharding_rules.h"

namespace meshserve {
namespace rules_case {
namespace {

using Inputs = absl::Span<const ArrayType>;
using Out = std::optional<PartitionSpec>;

const absl::flat_hash_set<std::string>& BinaryOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "add", "sub", "mul", "div", "max", "min", "pow", "rem", "atan2", "and", "or", "xor",
      "eq", "ne", "lt", "le", "gt", "ge", "nextafter", "complex", "add_any"};
  return *ops;
}

const absl::flat_hash_set<std::string>& UnaryOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "neg", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
      "abs", "sqrt", "rsqrt", "cbrt", "sign", "floor", "ceil", "round", "not", "square",
      "reciprocal", "erf", "silu", "gelu", "relu", "sigmoid", "swish", "convert_element_type",
      "copy", "real", "imag", "conj", "is_finite", "integer_pow", "erf_inv", "asin", "acos",
      "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "lgamma", "digamma"};
  return *ops;
}

absl::Status WantInputs(absl::string_view op, Inputs in, size_t n) {
  if (in.size() != n) {
    return InvalidArgument(op, " expects ", n, " input", n == 1 ? "" : "s", ", got ", in.size());
  }
  return absl::OkStatus();
}

absl::Status NoOutSharding(absl::string_view op, const Out& out) {
  if (out.has_value()) {
    return InvalidArgument(op, "() got an unexpected keyword argument 'out_sharding': ", op,
                           " takes no out_sharding (change an input with jax.sharding.reshard "
                           "or wrap the op in jax.sharding.auto_axes(out_sharding=...))");
  }
  return absl::OkStatus();
}

absl::StatusOr<DotDimensionNumbers> DotDims(const Json& p) {
  DotDimensionNumbers d;
  MS_ASSIGN_OR_RETURN(d.lhs_contracting, GetIntList(p, "lhs_contracting", "params"));
  MS_ASSIGN_OR_RETURN(d.rhs_contracting, GetIntList(p, "rhs_contracting", "params"));
  MS_ASSIGN_OR_RETURN(auto lb, GetOptIntList(p, "lhs_batch", "params"));
  MS_ASSIGN_OR_RETURN(auto rb, GetOptIntList(p, "rhs_batch", "params"));
  d.lhs_batch = lb.value_or(std::vector<int64_t>{});
  d.rhs_batch = rb.value_or(std::vector<int64_t>{});
  return d;
}

absl::StatusOr<std::optional<DType>> OptDType(const Json& p, const char* key) {
  if (FirstKey(p, {key}) == nullptr) return std::optional<DType>();
  MS_ASSIGN_OR_RETURN(std::string s, GetString(p, key, "params"));
  MS_ASSIGN_OR_RETURN(DType d, ParseDType(s), "params.", key);
  return std::optional<DType>(d);
}

absl::StatusOr<ConvParams> ConvParamsFromJson(const Json& p) {
  ConvParams c;
  if (const char* k = FirstKey(p, {"dimension_numbers"})) {
    const Json& dn = p[k];
    if (!dn.is_array() || dn.size() != 3 || !dn[0].is_string() || !dn[1].is_string() ||
        !dn[2].is_string()) {
      return InvalidArgument("params.dimension_numbers must be [lhs_spec, rhs_spec, out_spec] "
                             "strings such as [\"NWC\", \"WIO\", \"NWC\"], got ", ShowJson(dn));
    }
    c.lhs_spec = dn[0].get<std::string>();
    c.rhs_spec = dn[1].get<std::string>();
    c.out_spec = dn[2].get<std::string>();
  }
  if (const char* k = FirstKey(p, {"padding"})) {
    const Json& pad = p[k];
    if (pad.is_string()) {
      c.padding = pad.get<std::string>();
    } else if (pad.is_array()) {
      for (size_t i = 0; i < pad.size(); ++i) {
        MS_ASSIGN_OR_RETURN(std::vector<int64_t> pair,
                            GetIntList(Json::object({{"p", pad[i]}}), "p",
                                       absl::StrCat("params.padding[", i, "]")));
        if (pair.size() != 2) {
          return InvalidArgument("params.padding[", i, "] must be a (low, high) pair, got ",
                                 ShowJson(pad[i]));
        }
        c.explicit_padding.emplace_back(pair[0], pair[1]);
      }
    } else {
      return InvalidArgument("params.padding must be \"SAME\", \"VALID\" or (low, high) pairs, "
                             "got ", ShowJson(pad));
    }
  }
  MS_ASSIGN_OR_RETURN(auto ws, GetOptIntList(p, "window_strides", "params"));
  MS_ASSIGN_OR_RETURN(auto ld, GetOptIntList(p, "lhs_dilation", "params"));
  MS_ASSIGN_OR_RETURN(auto rd, GetOptIntList(p, "rhs_dilation", "params"));
  MS_ASSIGN_OR_RETURN(auto fg, GetOptInt(p, "feature_group_count", "params"));
  MS_ASSIGN_OR_RETURN(auto bg, GetOptInt(p, "batch_group_count", "params"));
  c.window_strides = ws.value_or(std::vector<int64_t>{});
  c.lhs_dilation = ld.value_or(std::vector<int64_t>{});
  c.rhs_dilation = rd.value_or(std::vector<int64_t>{});
  c.feature_group_count = fg.value_or(1);
  c.batch_group_count = bg.value_or(1);
  return c;
}

std::optional<ArrayType> OptInput(Inputs in, size_t i) {
  return i < in.size() ? std::optional<ArrayType>(in[i]) : std::nullopt;
}

absl::StatusOr<ArrayType> RunShapeOp(absl::string_view op, const Json& p, Inputs in,
                                     const Out& out);

// One group of ops each: nullopt when `op` is not in the group.
using MaybeResult = std::optional<absl::StatusOr<ArrayType>>;
using OpGroup = MaybeResult (*)(absl::string_view op, const Json& p, Inputs in, const Out& out);

// The model-file ops (model_op.h) that have their own rule here; the rest
// (add, mul, activations, reshape, transpose) are JAX primitives below.
MaybeResult RunModelOp(ModelOp kind, absl::string_view op, const Json& p, Inputs in,
                       const Out& out) {
  switch (kind) {
    case ModelOp::kEinsum: {
      MS_ASSIGN_OR_RETURN(std::string eq, GetString(p, "equation", "params"));
      MS_ASSIGN_OR_RETURN(std::optional<DType> pet, OptDType(p, "preferred_element_type"));
      return EinsumRule(eq, in, out, pet);
    }
    case ModelOp::kReshard:
      MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
      return ReshardRule(in[0], out);
    case ModelOp::kLinear:
      if (in.size() != 2 && in.size() != 3) return InvalidArgument("linear expects 2 or 3 inputs (x, kernel[, bias]), got ", in.size());
      return LinearRule(in[0], in[1], OptInput(in, 2), out);
    case ModelOp::kRmsNorm:
    case ModelOp::kLayerNorm:
      MS_RETURN_IF_ERROR(NoOutSharding(op, out));
      if (in.empty() || in.size() > 3) return InvalidArgument(op, " expects 1 to 3 inputs (x[, scale[, bias]]), got ", in.size());
      return NormRule(op, in[0], OptInput(in, 1), OptInput(in, 2));
    case ModelOp::kSoftmax:
      MS_RETURN_IF_ERROR(NoOutSharding(op, out));
      MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
      return SoftmaxRule(in[0]);
    case ModelOp::kEmbed:
      MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
      return EmbedRule(in[0], in[1], out);
    default:
      return std::nullopt;
  }
}

}  // namespace

absl::StatusOr<ArrayType> RunOp(absl::string_view op, const Json& p, Inputs in,
                                const Out& out) {
  if (std::optional<ModelOp> kind = ModelOpFromName(op)) {
    MaybeResult result = RunModelOp(*kind, op, p, in, out);
    if (result.has_value()) return *std::move(result);
  }
  const std::string name(op);
  if (name == "dot_general" || name == "dot" || name == "matmul") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
    MS_ASSIGN_OR_RETURN(DotDimensionNumbers d, DotDims(p));
    MS_ASSIGN_OR_RETURN(std::optional<DType> pet, OptDType(p, "preferred_element_type"));
    return DotGeneralRule(in[0], in[1], d, out, pet);
  }
  if (BinaryOps().contains(name)) {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    if (in.empty()) return InvalidArgument(op, " expects at least one input, got 0");
    return ElementwiseRule(op, in);
  }
  if (name == "select" || name == "where") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 3));
    return SelectRule(in[0], in[1], in[2]);
  }
  if (UnaryOps().contains(name)) {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    return UnaryRule(op, in[0]);
  }
  if (name == "auto_axes") {
    MS_ASSIGN_OR_RETURN(std::string inner, GetString(p, "inner_op", "params"));
    if (inner == "auto_axes") return InvalidArgument("params.inner_op cannot be auto_axes itself");
    MS_ASSIGN_OR_RETURN(auto axes, OptAxisNames(p, {"axes"}));
    return AutoAxesRule(in, out, axes, [&](Inputs args) -> absl::StatusOr<ArrayType> {
      return RunOp(inner, p, args, std::nullopt);
    });
  }
  if (name == "make_type") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    return MakeTypeRule(in[0].dtype, in[0].shape, in[0].sharding.mesh(), in[0].spec());
  }
  if (name == "shard_map_body_type") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_ASSIGN_OR_RETURN(auto manual, OptAxisNames(p, {"manual_axes", "axis_names", "axes"}));
    return ShardMapBodyTypeRule(in[0], manual);
  }
  if (name == "embed_attend") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
    return EmbedAttendRule(in[0], in[1], out);
  }
  return RunShapeOp(op, p, in, out);
}

namespace {

// params.padding_config: one [low, high, interior] per dim.
absl::StatusOr<std::vector<std::array<int64_t, 3>>> PaddingConfigFromJson(const Json& p) {
  const char* k = FirstKey(p, {"padding_config"});
  if (k == nullptr || !p[k].is_array()) {
    return InvalidArgument("params.padding_config must be a list of [low, high, interior], got ",
                           k == nullptr ? "nothing" : ShowJson(p[k]));
  }
  std::vector<std::array<int64_t, 3>> config;
  for (size_t i = 0; i < p[k].size(); ++i) {
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> t,
                        GetIntList(Json::object({{"c", p[k][i]}}), "c",
                                   absl::StrCat("params.padding_config[", i, "]")));
    if (t.size() != 3) {
      return InvalidArgument("params.padding_config[", i, "] must be [low, high, interior], got ",
                             ShowJson(p[k][i]));
    }
    config.push_back({t[0], t[1], t[2]});
  }
  return config;
}

// reshape, transpose, expand_dims, squeeze, broadcast.
MaybeResult RunLayoutOp(absl::string_view op, const Json& p, Inputs in, const Out& out) {
  const std::string name(op);
  if (name == "reshape") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, IntsAny(p, {"new_shape", "new_sizes", "shape"}));
    MS_ASSIGN_OR_RETURN(auto dims, GetOptIntList(p, "dimensions", "params"));
    return ReshapeRule(in[0], sizes, out, dims);
  }
  if (name == "transpose") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(auto perm, OptIntsAny(p, {"perm", "permutation", "axes"}));
    if (!perm.has_value()) {  // jnp.transpose default: reverse the dims
      perm.emplace();
      for (int d = in[0].rank() - 1; d >= 0; --d) perm->push_back(d);
    }
    return TransposeRule(in[0], *perm);
  }
  if (name == "expand_dims") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, IntsAny(p, {"axis", "dimensions", "axes"}));
    return ExpandDimsRule(in[0], axes);
  }
  if (name == "squeeze") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(auto dims, OptIntsAny(p, {"dimensions", "axis", "axes"}));
    return SqueezeRule(in[0], dims);
  }
  if (name == "broadcast_to" || name == "broadcast_in_dim") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, IntsAny(p, {"shape"}));
    return BroadcastToRule(in[0], shape, out);
  }
  return std::nullopt;
}

// reductions and cumulative ops.
MaybeResult RunReduceOp(absl::string_view op, const Json& p, Inputs in, const Out& out) {
  const std::string name(op);
  if (name.rfind("reduce_", 0) == 0 || name == "sum" || name == "argmax" || name == "argmin") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(auto axes, OptIntsAny(p, {"axes", "axis", "dimensions"}));
    return ReduceRule(name == "sum" ? "reduce_sum" : op, in[0], axes, out);
  }
  if (name == "cumsum" || name == "cumprod" || name == "cummax" || name == "cummin" ||
      name == "cumlogsumexp") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::optional<int64_t> axis, GetOptInt(p, "axis", "params"));
    return CumulativeRule(op, in[0], axis);
  }
  return std::nullopt;
}

// concatenate, stack, split, slice, pad, tile.
MaybeResult RunConcatSliceOp(absl::string_view op, const Json& p, Inputs in, const Out& out) {
  const std::string name(op);
  if (name == "concatenate") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_ASSIGN_OR_RETURN(int64_t dim, IntAny(p, {"dimension", "axis"}, 0));
    return ConcatenateRule(in, dim);
  }
  if (name == "stack") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_ASSIGN_OR_RETURN(int64_t axis, IntAny(p, {"axis", "dimension"}, 0));
    return StackRule(in, axis);
  }
  if (name == "split") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, IntsAny(p, {"sizes"}));
    MS_ASSIGN_OR_RETURN(int64_t axis, IntAny(p, {"axis", "dimension"}, 0));
    MS_ASSIGN_OR_RETURN(std::vector<ArrayType> parts, SplitRule(in[0], sizes, axis));
    if (parts.empty()) return InvalidArgument("split: params.sizes is empty");
    return parts[0];
  }
  if (name == "slice") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> start, IntsAny(p, {"start", "start_indices"}));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> limit, IntsAny(p, {"limit", "limit_indices"}));
    MS_ASSIGN_OR_RETURN(auto strides, GetOptIntList(p, "strides", "params"));
    return SliceRule(in[0], start, limit, strides);
  }
  if (name == "pad") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    if (in.empty() || in.size() > 2) return InvalidArgument("pad expects 1 input (and an optional padding value), got ", in.size());
    MS_ASSIGN_OR_RETURN(auto config, PaddingConfigFromJson(p));
    return PadRule(in[0], config);
  }
  if (name == "tile") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 1));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> reps, IntsAny(p, {"reps"}));
    return TileRule(in[0], reps);
  }
  return std::nullopt;
}

// jnp.take / a.at[i].get(out_sharding=), lax.gather, lax.dynamic_slice.
MaybeResult RunIndexingOp(absl::string_view op, const Json& p, Inputs in, const Out& out) {
  const std::string name(op);
  if (name == "take") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
    MS_ASSIGN_OR_RETURN(std::optional<int64_t> axis, GetOptInt(p, "axis", "params"));
    return TakeRule(in[0], in[1], axis, out);
  }
  if (name == "gather") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
    GatherDimensionNumbers d;
    std::vector<int64_t> sizes;
    MS_ASSIGN_OR_RETURN(d.offset_dims, IntsAny(p, {"offset_dims"}));
    MS_ASSIGN_OR_RETURN(d.collapsed_slice_dims, IntsAny(p, {"collapsed_slice_dims"}));
    MS_ASSIGN_OR_RETURN(d.start_index_map, IntsAny(p, {"start_index_map"}));
    MS_ASSIGN_OR_RETURN(sizes, IntsAny(p, {"slice_sizes"}));
    MS_ASSIGN_OR_RETURN(auto ob, OptIntsAny(p, {"operand_batching_dims"}));
    MS_ASSIGN_OR_RETURN(auto ib, OptIntsAny(p, {"start_indices_batching_dims"}));
    d.operand_batching_dims = ob.value_or(std::vector<int64_t>{});
    d.start_indices_batching_dims = ib.value_or(std::vector<int64_t>{});
    return GatherRule(in[0], in[1], d, sizes);
  }
  if (name == "dynamic_slice") {
    MS_RETURN_IF_ERROR(NoOutSharding(op, out));
    if (in.empty()) return InvalidArgument("dynamic_slice expects the operand (then optional "
                                           "scalar start indices), got 0 inputs");
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, IntsAny(p, {"slice_sizes"}));
    if (in.size() > 1) return DynamicSliceRule(in[0], in.subspan(1), sizes);
    // Static start indices (params.start_indices, default zeros): int32 scalars.
    MS_ASSIGN_OR_RETURN(auto starts, OptIntsAny(p, {"start_indices"}));
    size_t n = starts.has_value() ? starts->size() : in[0].shape.size();
    std::vector<ArrayType> idx;
    for (size_t i = 0; i < n; ++i) {
      MS_ASSIGN_OR_RETURN(ArrayType t, MakeArrayType(DType::kInt32, {}, in[0].sharding.mesh(),
                                                     PartitionSpec()));
      idx.push_back(std::move(t));
    }
    return DynamicSliceRule(in[0], idx, sizes);
  }
  return std::nullopt;
}

// conv_general_dilated.
MaybeResult RunConvOp(absl::string_view op, const Json& p, Inputs in, const Out& out) {
  const std::string name(op);
  if (name == "conv_general_dilated" || name == "conv") {
    MS_RETURN_IF_ERROR(WantInputs(op, in, 2));
    MS_ASSIGN_OR_RETURN(ConvParams c, ConvParamsFromJson(p));
    return ConvGeneralDilatedRule(in[0], in[1], c, out);
  }
  return std::nullopt;
}

absl::StatusOr<ArrayType> RunShapeOp(absl::string_view op, const Json& p, Inputs in,
                                     const Out& out) {
  for (OpGroup group : {RunLayoutOp, RunReduceOp, RunConcatSliceOp, RunIndexingOp, RunConvOp}) {
    MaybeResult result = group(op, p, in, out);
    if (result.has_value()) return *std::move(result);
  }
  return Unimplemented("sharding rule for ", op,
                       " is not implemented (unknown op '", op,
                       "'). You can work around this error by dropping that operation into "
                       "full auto sharding mode via: `jax.sharding.auto_axes(fun, "
                       "out_shardings=...)`");
}

}  // namespace
}  // namespace rules_case
}  // namespace meshserve
