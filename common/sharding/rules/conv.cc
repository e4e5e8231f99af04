#include "common/sharding/rules/conv.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;
using rules::Shape;

// Index permutation (batch/out-feature, feature/in-feature, spatial...) of a
// layout string; spatial dims ordered as in the rhs spec.
absl::StatusOr<std::vector<int>> Perm(const std::string& spec, char first, char second,
                                      const std::string& rhs_spec) {
  std::vector<int> perm;
  size_t a = spec.find(first), b = spec.find(second);
  if (a == std::string::npos || b == std::string::npos) {
    return InvalidArgument("conv_general_dilated dimension_numbers: '", spec, "' must contain '",
                           std::string(1, first), "' and '", std::string(1, second), "'");
  }
  perm.push_back(static_cast<int>(a));
  perm.push_back(static_cast<int>(b));
  std::vector<int> spatial;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == first || spec[i] == second) continue;
    if (rhs_spec.find(spec[i]) == std::string::npos ||
        std::count(spec.begin(), spec.end(), spec[i]) != 1) {
      return InvalidArgument("conv_general_dilated dimension_numbers: spatial dim '",
                             std::string(1, spec[i]), "' of '", spec,
                             "' must appear exactly once in it and in the rhs spec '",
                             rhs_spec, "'");
    }
    spatial.push_back(static_cast<int>(i));
  }
  std::sort(spatial.begin(), spatial.end(), [&](int x, int y) {
    return rhs_spec.find(spec[x]) < rhs_spec.find(spec[y]);
  });
  perm.insert(perm.end(), spatial.begin(), spatial.end());
  return perm;
}

int64_t At(const std::vector<int64_t>& v, size_t i) { return v.empty() ? 1 : v[i]; }

absl::StatusOr<Shape> ConvOutShape(const ArrayType& lhs, const ArrayType& rhs,
                                   const ConvParams& p, const std::vector<int>& lp,
                                   const std::vector<int>& rp, const std::vector<int>& op) {
  const size_t n_spatial = lp.size() - 2;
  for (const auto* v : {&p.window_strides, &p.lhs_dilation, &p.rhs_dilation}) {
    if (!v->empty() && v->size() != n_spatial) {
      return InvalidArgument("conv_general_dilated: window_strides/dilations must have one "
                             "entry per spatial dim (", n_spatial, "), got ", v->size());
    }
    for (int64_t x : *v) {
      if (x < 1 || x > (int64_t{1} << 30)) {
        return InvalidArgument("conv_general_dilated: strides and dilations must be in "
                               "[1, 2^30], got ", x);
      }
    }
  }
  if (!p.explicit_padding.empty() && p.explicit_padding.size() != n_spatial) {
    return InvalidArgument("conv_general_dilated: padding must have one (low, high) pair per "
                           "spatial dim (", n_spatial, "), got ", p.explicit_padding.size());
  }
  for (const auto& [lo, hi] : p.explicit_padding) {
    if (lo < -(int64_t{1} << 40) || lo > (int64_t{1} << 40) || hi < -(int64_t{1} << 40) ||
        hi > (int64_t{1} << 40)) {
      return InvalidArgument("conv_general_dilated: padding (", lo, ", ", hi, ") is out of range");
    }
  }
  if (p.feature_group_count < 1 || p.batch_group_count < 1) {
    return InvalidArgument("conv_general_dilated: group counts must be >= 1");
  }
  const int64_t lhs_features = lhs.shape[lp[1]], rhs_in = rhs.shape[rp[1]];
  if (lhs_features != rhs_in * p.feature_group_count) {
    return InvalidArgument("conv_general_dilated lhs feature dimension size divided by "
                           "feature_group_count must equal the rhs input feature dimension "
                           "size, but ", lhs_features, " // ", p.feature_group_count,
                           " != ", rhs_in, ".");
  }
  if (lhs.shape[lp[0]] % p.batch_group_count != 0) {
    return InvalidArgument("conv_general_dilated lhs batch dimension size ", lhs.shape[lp[0]],
                           " must be divisible by batch_group_count ", p.batch_group_count);
  }
  Shape out(op.size());
  out[op[0]] = lhs.shape[lp[0]] / p.batch_group_count;
  out[op[1]] = rhs.shape[rp[0]];
  for (size_t k = 0; k < n_spatial; ++k) {
    const int64_t in = lhs.shape[lp[2 + k]];
    const int64_t win = rhs.shape[rp[2 + k]];
    int64_t in_d = 0, win_d = 0;
    if ((in > 0 && !CheckedMul(in - 1, At(p.lhs_dilation, k), &in_d)) ||
        (win > 0 && !CheckedMul(win - 1, At(p.rhs_dilation, k), &win_d)) ||
        in_d > (int64_t{1} << 50) || win_d > (int64_t{1} << 50)) {
      return InvalidArgument("conv_general_dilated: dilated sizes overflow at spatial dim ", k);
    }
    if (in > 0) ++in_d;
    if (win > 0) ++win_d;
    const int64_t stride = At(p.window_strides, k);
    int64_t lo = 0, hi = 0;
    if (!p.explicit_padding.empty()) {
      lo = p.explicit_padding[k].first;
      hi = p.explicit_padding[k].second;
    } else if (p.padding == "SAME" || p.padding == "SAME_LOWER") {
      const int64_t o = (in_d + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((o - 1) * stride + win_d - in_d, 0);
      lo = p.padding == "SAME" ? total / 2 : (total + 1) / 2;
      hi = total - lo;
    } else if (p.padding != "VALID") {
      return InvalidArgument("conv_general_dilated: unknown padding '", p.padding,
                             "' (want SAME, SAME_LOWER, VALID or (low, high) pairs)");
    }
    const int64_t padded = in_d + lo + hi;
    out[op[2 + k]] = padded < win_d ? 0 : (padded - win_d) / stride + 1;
  }
  return out;
}

}  // namespace

absl::StatusOr<ArrayType> ConvGeneralDilatedRule(const ArrayType& lhs, const ArrayType& rhs,
                                                 const ConvParams& params,
                                                 const std::optional<PartitionSpec>& out_sharding) {
  if (lhs.rank() < 2 || lhs.rank() != rhs.rank()) {
    return InvalidArgument("conv_general_dilated lhs and rhs must have the same rank >= 2, got ",
                           lhs.rank(), " and ", rhs.rank());
  }
  std::string spatial = std::string("HWDXYZUV").substr(0, lhs.rank() - 2);
  std::string ls = params.lhs_spec.empty() ? "NC" + spatial : params.lhs_spec;
  std::string rs = params.rhs_spec.empty() ? "OI" + spatial : params.rhs_spec;
  std::string os = params.out_spec.empty() ? "NC" + spatial : params.out_spec;
  for (const std::string* s : {&ls, &rs, &os}) {
    if (static_cast<int>(s->size()) != lhs.rank()) {
      return InvalidArgument("conv_general_dilated dimension_numbers '", *s,
                             "' must have one letter per dim (rank ", lhs.rank(), ")");
    }
  }
  MS_ASSIGN_OR_RETURN(std::vector<int> lp, Perm(ls, 'N', 'C', rs));
  MS_ASSIGN_OR_RETURN(std::vector<int> rp, Perm(rs, 'O', 'I', rs));
  MS_ASSIGN_OR_RETURN(std::vector<int> op, Perm(os, 'N', 'C', rs));
  MS_ASSIGN_OR_RETURN(Shape out_shape, ConvOutShape(lhs, rhs, params, lp, rp, op));

  const ArrayType* ptrs[] = {&lhs, &rhs};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("conv_general_dilated", ptrs));
  std::optional<PartitionSpec> out;
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(out, rules::ParseOutSharding("conv_general_dilated", mesh, *out_sharding,
                                                     static_cast<int>(out_shape.size())));
  }
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(lhs.dtype, out_shape, mesh, ptrs);
  if (out.has_value()) {
    return rules::FinishResult("conv_general_dilated", ptrs, lhs.dtype, std::move(out_shape),
                               mesh, out->entries(), out->unreduced());
  }
  const Entries l = rules::ExplicitEntries(lhs), r = rules::ExplicitEntries(rhs);
  bool rhs_replicated = std::all_of(r.begin(), r.end(), [](const Entry& e) { return e.empty(); });
  if (!rhs_replicated || !l[lp[1]].empty()) {
    return InvalidArgument(
        "Please specify the output sharding via `out_sharding` parameter of "
        "`conv_general_dilated`. Got lhs=", lhs.ToString(true),
        " and rhs=", rhs.ToString(true),
        " (the rule needs a fully replicated rhs and an unsharded lhs feature dim)");
  }
  MS_ASSIGN_OR_RETURN(Entries entries, rules::VaryingOutShapeEntries("conv_general_dilated",
                                                                     mesh, lhs, out_shape));
  return rules::FinishResult("conv_general_dilated", ptrs, lhs.dtype, std::move(out_shape), mesh,
                             std::move(entries));
}

}  // namespace meshserve
