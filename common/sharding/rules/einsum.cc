#include "common/sharding/rules/einsum.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/einsum_path.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/elementwise.h"
#include "common/sharding/rules/layout_ops.h"
#include "common/sharding/rules/reduce.h"
#include "common/sharding/rules/reshard.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using Out = std::optional<PartitionSpec>;

bool Has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

std::string Without(const std::string& s, const std::string& chars) {
  std::string out;
  for (char c : s) {
    if (!Has(chars, c)) out.push_back(c);
  }
  return out;
}

// collections.Counter(names), in order of first appearance.
std::vector<std::pair<char, int>> Counts(const std::string& names) {
  std::vector<std::pair<char, int>> out;
  for (char c : names) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == c; });
    if (it == out.end()) {
      out.emplace_back(c, 1);
    } else {
      ++it->second;
    }
  }
  return out;
}

int CountOf(const std::string& s, char c) {
  return static_cast<int>(std::count(s.begin(), s.end(), c));
}

// _einsum's helpers over one operand and its labels.
class Step {
 public:
  Step(const Mesh& mesh, std::optional<DType> dtype) : mesh_(mesh), dtype_(dtype) {}

  // sum_uniques: reduce_sum over `uniques`.
  absl::Status SumUniques(ArrayType* x, std::string* names, const std::string& uniques,
                          const Out& out_s) const {
    if (uniques.empty()) return absl::OkStatus();
    std::vector<int64_t> axes;
    for (char c : uniques) axes.push_back(static_cast<int64_t>(names->find(c)));
    MS_ASSIGN_OR_RETURN(*x, ReduceRule("reduce_sum", *x, axes, out_s));
    *names = Without(*names, uniques);
    return absl::OkStatus();
  }

  // sum_repeats: select(eye, x, 0) over each repeated label, then the sum
  // (all its dims, or all but the last when the label is kept).
  absl::Status SumRepeats(ArrayType* x, std::string* names,
                          const std::vector<std::pair<char, int>>& counts,
                          const std::string& keep_names, const Out& out_s) const {
    for (const auto& [name, count] : counts) {
      if (count <= 1) continue;
      std::vector<int64_t> axes;
      for (size_t i = 0; i < names->size(); ++i) {
        if ((*names)[i] == name) axes.push_back(static_cast<int64_t>(i));
      }
      // lax._delta: an unsharded bool array on the context mesh.
      MS_ASSIGN_OR_RETURN(ArrayType eye, MakeArrayType(DType::kBool, x->shape, mesh_,
                                                       PartitionSpec()));
      MS_ASSIGN_OR_RETURN(*x, SelectRule(eye, *x, *x));
      if (!Has(keep_names, name)) {
        MS_ASSIGN_OR_RETURN(*x, ReduceRule("reduce_sum", *x, axes, out_s));
        *names = Without(*names, std::string(1, name));
      } else {
        axes.pop_back();
        MS_ASSIGN_OR_RETURN(*x, ReduceRule("reduce_sum", *x, axes, out_s));
        for (int k = 0; k < count - 1; ++k) names->erase(names->find(name), 1);
      }
    }
    return absl::OkStatus();
  }

  // filter_singleton_dims: squeezes the size-1 dims whose label faces a
  // larger dim in the other operand.
  absl::Status FilterSingletonDims(ArrayType* x, std::string* names,
                                   const std::vector<int64_t>& other_shape,
                                   const std::string& other_names) const {
    std::vector<int64_t> squeeze;
    std::string kept;
    for (size_t i = 0; i < names->size(); ++i) {
      size_t j = other_names.find((*names)[i]);
      bool keep = x->shape[i] != 1 || j == std::string::npos || other_shape[j] == 1;
      if (keep) {
        kept.push_back((*names)[i]);
      } else {
        squeeze.push_back(static_cast<int64_t>(i));
      }
    }
    if (squeeze.empty()) return absl::OkStatus();
    MS_ASSIGN_OR_RETURN(*x, SqueezeRule(*x, squeeze));
    *names = kept;
    return absl::OkStatus();
  }

  // The two-operand step; `lhs` is the operand popped first.
  absl::StatusOr<ArrayType> Pair(ArrayType lhs, std::string lhs_names, ArrayType rhs,
                                 std::string rhs_names, const std::string& contracted_all,
                                 const std::string& result_names, const Out& out_s,
                                 std::string* names) const {
    MS_RETURN_IF_ERROR(FilterSingletonDims(&lhs, &lhs_names, rhs.shape, rhs_names));
    MS_RETURN_IF_ERROR(FilterSingletonDims(&rhs, &rhs_names, lhs.shape, lhs_names));
    const auto lhs_counts = Counts(lhs_names), rhs_counts = Counts(rhs_names);
    std::string lhs_uniques, rhs_uniques;
    for (char c : contracted_all) {
      if (CountOf(lhs_names, c) == 1 && !Has(rhs_names, c)) lhs_uniques.push_back(c);
      if (CountOf(rhs_names, c) == 1 && !Has(lhs_names, c)) rhs_uniques.push_back(c);
    }
    MS_RETURN_IF_ERROR(SumUniques(&lhs, &lhs_names, lhs_uniques, std::nullopt));
    MS_RETURN_IF_ERROR(SumUniques(&rhs, &rhs_names, rhs_uniques, std::nullopt));
    MS_RETURN_IF_ERROR(SumRepeats(&lhs, &lhs_names, lhs_counts, result_names + rhs_names,
                                  std::nullopt));
    MS_RETURN_IF_ERROR(SumRepeats(&rhs, &rhs_names, rhs_counts, result_names + lhs_names,
                                  std::nullopt));
    std::string contracted, batch;
    for (char c : contracted_all) {
      if (Has(lhs_names, c) || Has(rhs_names, c)) contracted.push_back(c);
    }
    for (char c : result_names) {
      if (Has(lhs_names, c) && Has(rhs_names, c)) batch.push_back(c);
    }
    DotDimensionNumbers lr;
    for (char c : batch) {
      lr.lhs_batch.push_back(static_cast<int64_t>(lhs_names.find(c)));
      lr.rhs_batch.push_back(static_cast<int64_t>(rhs_names.find(c)));
    }
    for (char c : contracted) {
      lr.lhs_contracting.push_back(static_cast<int64_t>(lhs_names.find(c)));
      lr.rhs_contracting.push_back(static_cast<int64_t>(rhs_names.find(c)));
    }
    const std::string deleted = batch + contracted;
    const std::string rem_lhs = Without(lhs_names, deleted), rem_rhs = Without(rhs_names, deleted);
    *names = batch + rem_rhs + rem_lhs;
    if (*names == result_names) {
      DotDimensionNumbers rl{lr.rhs_contracting, lr.lhs_contracting, lr.rhs_batch, lr.lhs_batch};
      return DotGeneralRule(rhs, lhs, rl, out_s, dtype_);
    }
    *names = batch + rem_lhs + rem_rhs;
    Out dot_out = out_s;
    if (out_s.has_value()) {  // _get_inverse_sharding
      PartitionSpec padded = out_s->PaddedTo(static_cast<int>(result_names.size()));
      Entries permuted;
      for (char c : *names) permuted.push_back(padded.entries()[result_names.find(c)]);
      dot_out = PartitionSpec(std::move(permuted), out_s->unreduced());
    }
    return DotGeneralRule(lhs, rhs, lr, dot_out, dtype_);
  }

 private:
  Mesh mesh_;
  std::optional<DType> dtype_;
};

// The loop of _einsum over opt_einsum's contractions.
absl::StatusOr<ArrayType> RunContractions(const Mesh& mesh, std::vector<ArrayType> ops,
                                          const std::vector<EinsumContraction>& contractions,
                                          const Out& out_s, std::optional<DType> dtype) {
  const Step step(mesh, dtype);
  for (const EinsumContraction& c : contractions) {
    std::string contracted(c.removed.begin(), c.removed.end());  // sorted
    std::string names;
    ArrayType x;
    if (c.positions.size() == 1) {
      x = ops[c.positions[0]];
      ops.erase(ops.begin() + c.positions[0]);
      names = c.inputs[0];
      const auto counts = Counts(names);
      std::string uniques;
      for (char u : contracted) {
        if (CountOf(names, u) == 1) uniques.push_back(u);
      }
      MS_RETURN_IF_ERROR(step.SumUniques(&x, &names, uniques, out_s));
      MS_RETURN_IF_ERROR(step.SumRepeats(&x, &names, counts, c.result, out_s));
    } else {
      ArrayType lhs = ops[c.positions[0]];
      ops.erase(ops.begin() + c.positions[0]);
      ArrayType rhs = ops[c.positions[1]];
      ops.erase(ops.begin() + c.positions[1]);
      MS_ASSIGN_OR_RETURN(x, step.Pair(std::move(lhs), c.inputs[0], std::move(rhs), c.inputs[1],
                                       contracted, c.result, out_s, &names));
    }
    if (names != c.result) {
      std::vector<int64_t> perm;
      for (char r : c.result) perm.push_back(static_cast<int64_t>(names.find(r)));
      MS_ASSIGN_OR_RETURN(x, TransposeRule(x, perm));
    }
    ops.push_back(std::move(x));
  }
  ArrayType result = std::move(ops.back());
  if (dtype.has_value()) result.dtype = *dtype;
  return result;
}

// Letters, and the output's labels each once and from some operand.
absl::Status CheckLabels(absl::string_view text, const EinsumSubscripts& s) {
  for (const std::string& in : s.inputs) {
    for (char c : in) {
      if (!absl::ascii_isalpha(static_cast<unsigned char>(c))) {
        return InvalidArgument("einsum equation '", text, "' has an invalid label '",
                               std::string(1, c), "'");
      }
    }
  }
  for (char c : s.out) {
    if (!absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      return InvalidArgument("einsum equation '", text, "' has an invalid label '",
                             std::string(1, c), "'");
    }
    if (CountOf(s.out, c) > 1) {
      return InvalidArgument("einsum equation '", text, "': output label '", std::string(1, c),
                             "' appears more than once");
    }
    if (std::none_of(s.inputs.begin(), s.inputs.end(),
                     [&](const std::string& in) { return Has(in, c); })) {
      return InvalidArgument("einsum equation '", text, "': output label '", std::string(1, c),
                             "' does not appear in any operand");
    }
  }
  return absl::OkStatus();
}

// opt_einsum's parser; `ranks` nullptr: ellipsis unsupported (kUnimplemented).
absl::StatusOr<EinsumSubscripts> Parse(absl::string_view text, const absl::Span<const int>* ranks) {
  std::string eq;
  for (char c : text) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  }
  EinsumSubscripts s;
  std::string inputs = eq;
  size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    inputs = eq.substr(0, arrow);
    s.out = eq.substr(arrow + 2);
    s.explicit_output = true;
    if (Has(s.out, '-') || Has(s.out, '>')) {
      return InvalidArgument("einsum equation '", text, "': subscripts can only contain one '->'");
    }
  }
  s.inputs = absl::StrSplit(inputs, ',');
  if (ranks != nullptr && s.inputs.size() != ranks->size()) {
    return InvalidArgument("einsum equation '", text, "' names ", s.inputs.size(),
                           " operands but ", ranks->size(), " were given: Number of einsum "
                           "subscripts must be equal to the number of operands.");
  }
  if (eq.find('.') != std::string::npos) {
    if (ranks == nullptr) {
      return Unimplemented("einsum equation '", text, "': ellipsis is not supported");
    }
    MS_RETURN_IF_ERROR(ExpandEllipsis(text, *ranks, &s));
  }
  if (!s.explicit_output) {
    std::string all;
    for (const std::string& in : s.inputs) all += in;
    std::string once;
    for (char c : all) {
      if (CountOf(all, c) == 1 && !Has(s.out, c)) once.push_back(c);
    }
    std::sort(once.begin(), once.end());
    s.out += once;  // after the ellipsis labels, if any
  }
  MS_RETURN_IF_ERROR(CheckLabels(text, s));
  return s;
}

}  // namespace

absl::StatusOr<EinsumSubscripts> ParseEinsumSubscripts(absl::string_view text,
                                                       absl::Span<const int> ranks) {
  return Parse(text, &ranks);
}

absl::StatusOr<EinsumEquation> ParseEinsumEquation(absl::string_view text) {
  MS_ASSIGN_OR_RETURN(EinsumSubscripts s, Parse(text, nullptr));
  if (s.inputs.size() != 2) {
    return InvalidArgument("einsum equation '", text, "' must name exactly two operands, got ",
                           s.inputs.size());
  }
  for (const std::string& in : s.inputs) {
    for (char c : in) {
      if (CountOf(in, c) > 1) {
        return Unimplemented("einsum equation '", text, "': repeated label '",
                             std::string(1, c), "' within one operand is not supported");
      }
    }
  }
  return EinsumEquation{s.inputs[0], s.inputs[1], s.out, s.explicit_output};
}

absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation,
                                     absl::Span<const ArrayType> operands,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype) {
  if (operands.empty()) return InvalidArgument("einsum needs at least one operand");
  std::vector<int> ranks;
  std::vector<const ArrayType*> ptrs;
  for (const ArrayType& t : operands) {
    ranks.push_back(t.rank());
    ptrs.push_back(&t);
  }
  MS_ASSIGN_OR_RETURN(EinsumSubscripts s, ParseEinsumSubscripts(equation, ranks));
  std::vector<std::vector<int64_t>> shapes;
  for (const ArrayType& t : operands) shapes.push_back(t.shape);
  MS_ASSIGN_OR_RETURN(std::vector<EinsumContraction> contractions,
                      EinsumContractionPath(equation, s, shapes));
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("einsum", ptrs));
  if (out_sharding.has_value()) {
    // canonicalize_sharding runs at the jnp.einsum API with its name.
    MS_RETURN_IF_ERROR(rules::ParseOutSharding("einsum", mesh, *out_sharding,
                                               static_cast<int>(s.out.size()))
                           .status());
  }
  std::vector<ArrayType> ops(operands.begin(), operands.end());
  if (contractions.size() > 1 && out_sharding.has_value()) {
    std::vector<std::string> explicit_axes;
    for (const MeshAxis& a : mesh.axes()) {
      if (a.type == AxisType::kExplicit) explicit_axes.push_back(a.name);
    }
    MS_ASSIGN_OR_RETURN(
        ArrayType r, AutoAxesRule(operands, out_sharding, explicit_axes,
                                  [&](absl::Span<const ArrayType> args) {
                                    return RunContractions(
                                        mesh.WithAxisTypes(explicit_axes, AxisType::kAuto),
                                        {args.begin(), args.end()}, contractions, std::nullopt,
                                        out_dtype);
                                  }));
    if (out_dtype.has_value()) r.dtype = *out_dtype;
    return r;
  }
  return RunContractions(mesh, std::move(ops), contractions, out_sharding, out_dtype);
}

absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation, const ArrayType& lhs,
                                     const ArrayType& rhs,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype) {
  const ArrayType operands[] = {lhs, rhs};
  return EinsumRule(equation, operands, out_sharding, out_dtype);
}

}  // namespace meshserve
