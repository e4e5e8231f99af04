#include "common/sharding/rules/model_ops.h"

#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/elementwise.h"
#include "common/sharding/rules/reshard.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;

absl::Status CheckVector(absl::string_view op, absl::string_view what, const ArrayType& v,
                         int64_t size) {
  if (v.rank() != 1 || v.shape[0] != size) {
    return InvalidArgument(op, ": ", what, " must have shape (", size, ",), got ",
                           v.ToString(true));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArrayType> LinearRule(const ArrayType& input, const ArrayType& kernel,
                                     const std::optional<ArrayType>& bias,
                                     const std::optional<PartitionSpec>& out_sharding) {
  if (kernel.rank() != 2 || input.rank() < 1) {
    return InvalidArgument("linear: kernel must be rank 2 and input rank >= 1, got input ",
                           input.ToString(true), " and kernel ",
                           kernel.ToString(true));
  }
  DotDimensionNumbers dims;
  dims.lhs_contracting = {input.rank() - 1};
  dims.rhs_contracting = {0};
  MS_ASSIGN_OR_RETURN(ArrayType y, DotGeneralRule(input, kernel, dims, out_sharding));
  if (!bias.has_value()) return y;
  MS_RETURN_IF_ERROR(CheckVector("linear", "bias", *bias, kernel.shape[1]));
  std::vector<ArrayType> ops = {y, *bias};
  return ElementwiseRule("add", ops);
}

absl::StatusOr<ArrayType> NormRule(absl::string_view op_name, const ArrayType& input,
                                   const std::optional<ArrayType>& scale,
                                   const std::optional<ArrayType>& bias) {
  if (input.rank() < 1) {
    return InvalidArgument(op_name, ": input must have rank >= 1, got ",
                           input.ToString(true));
  }
  const int64_t d = input.shape.back();
  if (scale.has_value()) {
    MS_RETURN_IF_ERROR(CheckVector(op_name, "scale", *scale, d));
    std::vector<ArrayType> ops = {input, *scale};
    MS_RETURN_IF_ERROR(ElementwiseRule("mul", ops).status(), op_name);
  }
  if (bias.has_value()) {
    MS_RETURN_IF_ERROR(CheckVector(op_name, "bias", *bias, d));
    std::vector<ArrayType> ops = {input, *bias};
    MS_RETURN_IF_ERROR(ElementwiseRule("add", ops).status(), op_name);
  }
  return UnaryRule(op_name, input);
}

absl::StatusOr<ArrayType> SoftmaxRule(const ArrayType& input) {
  return UnaryRule("softmax", input);
}

absl::StatusOr<ArrayType> MaskedSoftmaxRule(const ArrayType& input,
                                            const std::optional<ArrayType>& where,
                                            bool causal) {
  if (causal && input.rank() < 2) {
    return InvalidArgument("softmax: causal needs rank >= 2 ([.., q, k]), got ",
                           input.ToString(true));
  }
  if (where.has_value()) {
    std::vector<ArrayType> ops = {input, *where};
    MS_ASSIGN_OR_RETURN(ArrayType both, ElementwiseRule("softmax where", ops));
    if (both.shape != input.shape) {
      return InvalidArgument("softmax: where ", where->ToString(true),
                             " does not broadcast to the input ", input.ToString(true));
    }
  }
  return UnaryRule("softmax", input);
}

absl::StatusOr<ArrayType> PositionsRule(const ArrayType& input, int64_t axis) {
  MS_RETURN_IF_ERROR(rules::CanonicalizeDim(axis, input.rank(), "positions axis").status());
  ArrayType out = input;
  out.dtype = DType::kInt32;
  out.sharding = NamedSharding::UncheckedCreate(input.sharding.mesh(),
                                                PartitionSpec(input.spec().entries()));
  return out;
}

absl::StatusOr<ArrayType> RopeRule(const ArrayType& input, int64_t seq_axis) {
  if (rules::IsIntegerDType(input.dtype) || input.dtype == DType::kBool || input.rank() < 2) {
    return InvalidArgument("rope: input must be a float array of rank >= 2, got ",
                           input.ToString(true));
  }
  const int last = input.rank() - 1;
  if (input.shape[last] % 2 != 0) {
    return InvalidArgument("rope: the last dim ", input.shape[last], " of ",
                           input.ToString(true), " must be even");
  }
  MS_ASSIGN_OR_RETURN(int axis, rules::CanonicalizeDim(seq_axis, input.rank(), "rope seq_axis"));
  if (axis == last) {
    return InvalidArgument("rope: seq_axis ", seq_axis, " is the rotated last dim of ",
                           input.ToString(true));
  }
  if (input.spec().entry(last).size() > 0) {
    return InvalidArgument("rope: the last dim (the rotated features) must not be sharded, got ",
                           input.ToString(true));
  }
  return UnaryRule("rope", input);
}

absl::StatusOr<ArrayType> AddBiasRule(absl::string_view op_name, const ArrayType& result,
                                      const ArrayType& bias) {
  if (result.rank() < 1) {
    return InvalidArgument(op_name, ": a bias needs a result of rank >= 1, got ",
                           result.ToString(true));
  }
  MS_RETURN_IF_ERROR(CheckVector(op_name, "bias", bias, result.shape.back()));
  std::vector<ArrayType> ops = {result, bias};
  return ElementwiseRule("add", ops);
}

absl::StatusOr<ArrayType> ActivationRule(absl::string_view op_name, const ArrayType& input) {
  return UnaryRule(op_name, input);
}

absl::StatusOr<ArrayType> EmbedRule(const ArrayType& indices, const ArrayType& embedding,
                                    const std::optional<PartitionSpec>& out_sharding) {
  if (embedding.rank() != 2) {
    return InvalidArgument("embed: embedding must be rank 2 [vocab, features], got ",
                           embedding.ToString(true));
  }
  if (indices.dtype != DType::kInt32 && indices.dtype != DType::kInt64 &&
      indices.dtype != DType::kUInt8 && indices.dtype != DType::kInt8) {
    return InvalidArgument("embed: indices must have an integer dtype, got ",
                           indices.ToString(true));
  }
  rules::Shape shape = indices.shape;
  shape.push_back(embedding.shape[1]);
  auto take = [&](absl::Span<const ArrayType> args) -> absl::StatusOr<ArrayType> {
    const ArrayType* ptrs[] = {&args[1], &args[0]};
    MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("gather", ptrs));
    if (!rules::RulesActive(mesh)) return rules::UnshardedResult(args[1].dtype, shape, mesh, ptrs);
    Entries emb = rules::ExplicitEntries(args[1]);
    if (!emb[0].empty()) {
      return InvalidArgument(
          "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather "
          "indexing: the embedding's vocabulary dim is sharded. Got embedding=",
          args[1].ToString(true), " and indices=", args[0].ToString(true));
    }
    Entries out = rules::ExplicitEntries(args[0]);
    out.push_back(emb[1]);
    return rules::FinishResult("gather", ptrs, args[1].dtype, shape, mesh, std::move(out));
  };
  std::vector<ArrayType> args = {indices, embedding};
  if (out_sharding.has_value()) return AutoAxesRule(args, out_sharding, std::nullopt, take);
  return take(args);
}

absl::StatusOr<ArrayType> EmbedAttendRule(const ArrayType& query, const ArrayType& embedding,
                                          const std::optional<PartitionSpec>& out_sharding) {
  if (embedding.rank() != 2 || query.rank() < 1) {
    return InvalidArgument("embed attend: embedding must be rank 2 and query rank >= 1, got ",
                           query.ToString(true), " and ",
                           embedding.ToString(true));
  }
  DotDimensionNumbers dims;
  dims.lhs_contracting = {query.rank() - 1};
  dims.rhs_contracting = {1};
  return DotGeneralRule(query, embedding, dims, out_sharding);
}

}  // namespace meshserve
