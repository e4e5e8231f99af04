#include "common/sharding/rules/einsum.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;


// Drops the dims whose label is in neither `other` nor `out` (reduce_sum).
absl::StatusOr<ArrayType> SumAwayUnique(const ArrayType& t, std::string* names,
                                        const std::string& other, const std::string& out) {
  rules::Shape shape;
  Entries entries;
  std::string kept;
  Entries in = rules::ExplicitEntries(t);
  for (size_t i = 0; i < names->size(); ++i) {
    char c = (*names)[i];
    if (other.find(c) == std::string::npos && out.find(c) == std::string::npos) continue;
    kept.push_back(c);
    shape.push_back(t.shape[i]);
    entries.push_back(in[i]);
  }
  *names = kept;
  MS_ASSIGN_OR_RETURN(ArrayType r, MakeArrayType(t.dtype, std::move(shape), t.sharding.mesh(),
                                                 PartitionSpec(std::move(entries))));
  r.varying = t.varying;
  return r;
}

}  // namespace

absl::StatusOr<EinsumEquation> ParseEinsumEquation(absl::string_view text) {
  std::string eq;
  for (char c : text) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  }
  if (eq.find("...") != std::string::npos) {
    return Unimplemented("einsum equation '", text, "': ellipsis is not supported");
  }
  EinsumEquation e;
  std::string inputs = eq;
  size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    inputs = eq.substr(0, arrow);
    e.out = eq.substr(arrow + 2);
    e.explicit_output = true;
  }
  std::vector<std::string> ops = absl::StrSplit(inputs, ',');
  if (ops.size() != 2) {
    return InvalidArgument("einsum equation '", text, "' must name exactly two operands, got ",
                           ops.size());
  }
  e.lhs = ops[0];
  e.rhs = ops[1];
  for (const std::string* s : {&e.lhs, &e.rhs, &e.out}) {
    for (char c : *s) {
      if (!absl::ascii_isalpha(static_cast<unsigned char>(c))) {
        return InvalidArgument("einsum equation '", text, "' has an invalid label '",
                               std::string(1, c), "'");
      }
    }
  }
  if (!e.explicit_output) {
    std::string all = e.lhs + e.rhs;
    for (char c : all) {
      if (std::count(all.begin(), all.end(), c) == 1) e.out.push_back(c);
    }
    std::sort(e.out.begin(), e.out.end());
  }
  for (const std::string* s : {&e.lhs, &e.rhs}) {
    for (char c : *s) {
      if (std::count(s->begin(), s->end(), c) > 1) {
        return Unimplemented("einsum equation '", text, "': repeated label '",
                             std::string(1, c), "' within one operand is not supported");
      }
    }
  }
  for (char c : e.out) {
    if (std::count(e.out.begin(), e.out.end(), c) > 1) {
      return InvalidArgument("einsum equation '", text, "': output label '",
                             std::string(1, c), "' appears more than once");
    }
    if (e.lhs.find(c) == std::string::npos && e.rhs.find(c) == std::string::npos) {
      return InvalidArgument("einsum equation '", text, "': output label '",
                             std::string(1, c), "' does not appear in any operand");
    }
  }
  return e;
}

// Long on purpose: mirrors jax/_src/numpy/einsum.py _einsum (two operands) one to one.
absl::StatusOr<ArrayType> EinsumRule(absl::string_view equation, const ArrayType& lhs,
                                     const ArrayType& rhs,
                                     const std::optional<PartitionSpec>& out_sharding,
                                     std::optional<DType> out_dtype) {
  MS_ASSIGN_OR_RETURN(EinsumEquation eq, ParseEinsumEquation(equation));
  if (static_cast<int>(eq.lhs.size()) != lhs.rank() ||
      static_cast<int>(eq.rhs.size()) != rhs.rank()) {
    return InvalidArgument("einsum equation '", equation, "' has ", eq.lhs.size(), " and ",
                           eq.rhs.size(), " labels but the operands have ranks ", lhs.rank(),
                           " and ", rhs.rank());
  }
  std::map<char, int64_t> sizes;
  for (const auto& [names, t] : {std::make_pair(&eq.lhs, &lhs), std::make_pair(&eq.rhs, &rhs)}) {
    for (size_t i = 0; i < names->size(); ++i) {
      auto [it, inserted] = sizes.emplace((*names)[i], t->shape[i]);
      if (!inserted && it->second != t->shape[i]) {
        return InvalidArgument("einsum equation '", equation, "': label '",
                               std::string(1, (*names)[i]), "' has sizes ", it->second,
                               " and ", t->shape[i]);
      }
    }
  }
  std::string lhs_names = eq.lhs, rhs_names = eq.rhs;
  MS_ASSIGN_OR_RETURN(ArrayType l, SumAwayUnique(lhs, &lhs_names, eq.rhs, eq.out));
  MS_ASSIGN_OR_RETURN(ArrayType r, SumAwayUnique(rhs, &rhs_names, eq.lhs, eq.out));

  std::string batch, lhs_rest, rhs_rest;
  DotDimensionNumbers lr;  // for dot_general(lhs, rhs)
  for (size_t i = 0; i < lhs_names.size(); ++i) {
    char c = lhs_names[i];
    size_t j = rhs_names.find(c);
    if (j == std::string::npos) {
      lhs_rest.push_back(c);
    } else if (eq.out.find(c) != std::string::npos) {
      batch.push_back(c);
      lr.lhs_batch.push_back(i);
      lr.rhs_batch.push_back(j);
    } else {
      lr.lhs_contracting.push_back(i);
      lr.rhs_contracting.push_back(j);
    }
  }
  for (char c : rhs_names) {
    if (lhs_names.find(c) == std::string::npos) rhs_rest.push_back(c);
  }
  // Try (rhs, lhs) first, as jnp.einsum does.
  bool swap = (batch + rhs_rest + lhs_rest) == eq.out;
  std::string dot_names = swap ? batch + rhs_rest + lhs_rest : batch + lhs_rest + rhs_rest;
  DotDimensionNumbers dims = lr;
  if (swap) {
    dims = DotDimensionNumbers{lr.rhs_contracting, lr.lhs_contracting, lr.rhs_batch,
                               lr.lhs_batch};
  }
  std::optional<PartitionSpec> dot_out;
  if (out_sharding.has_value()) {
    // canonicalize_sharding runs at the jnp.einsum API with its name.
    const ArrayType* ptrs[] = {&lhs, &rhs};
    MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("einsum", ptrs));
    MS_RETURN_IF_ERROR(rules::ParseOutSharding("einsum", mesh, *out_sharding,
                                               static_cast<int>(eq.out.size()))
                           .status());
    if (out_sharding->size() > static_cast<int>(eq.out.size())) {
      return InvalidArgument("Length of sharding.spec (", out_sharding->size(),
                             ") must be equal to aval's ndim (", eq.out.size(),
                             "). Got out_sharding ", out_sharding->ToString(),
                             " for einsum '", equation, "'");
    }
    PartitionSpec padded = out_sharding->PaddedTo(static_cast<int>(eq.out.size()));
    Entries permuted;
    for (char c : dot_names) permuted.push_back(padded.entries()[eq.out.find(c)]);
    dot_out = PartitionSpec(std::move(permuted), out_sharding->unreduced());
  }
  MS_ASSIGN_OR_RETURN(ArrayType dot, swap ? DotGeneralRule(r, l, dims, dot_out, out_dtype)
                                          : DotGeneralRule(l, r, dims, dot_out, out_dtype));
  if (dot_names == eq.out) return dot;
  rules::Shape shape;
  Entries entries;
  for (char c : eq.out) {
    size_t k = dot_names.find(c);
    shape.push_back(dot.shape[k]);
    entries.push_back(dot.spec().entry(static_cast<int>(k)));
  }
  MS_ASSIGN_OR_RETURN(ArrayType out,
                      MakeArrayType(dot.dtype, std::move(shape), dot.sharding.mesh(),
                                    PartitionSpec(std::move(entries), dot.spec().unreduced())));
  out.varying = dot.varying;
  return out;
}

}  // namespace meshserve
