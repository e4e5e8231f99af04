#include "common/sharding/rules/dot_general.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

using rules::Entries;
using rules::Entry;

std::string DimsRepr(const std::vector<int64_t>& dims) {
  if (dims.size() == 1) return absl::StrCat("(", dims[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
}

// JAX's _dot_general_shape_rule checks (TypeError there).
absl::Status CheckDotShapes(const ArrayType& lhs, const ArrayType& rhs,
                            const DotDimensionNumbers& d) {
  auto check_dims = [](const std::vector<int64_t>& dims, int rank,
                       absl::string_view what) -> absl::Status {
    absl::flat_hash_set<int64_t> seen;
    for (int64_t x : dims) {
      if (x < 0 || x >= rank) {
        return InvalidArgument("dot_general requires ", what,
                               " dimension numbers to be nonnegative and less than the "
                               "number of axes of the ",
                               what.substr(0, 3), " value, got ", DimsRepr(dims),
                               " for rank ", rank, ".");
      }
      if (!seen.insert(x).second) {
        return InvalidArgument("dot_general requires unique ", what,
                               " dimension numbers, got ", DimsRepr(dims), ".");
      }
    }
    return absl::OkStatus();
  };
  MS_RETURN_IF_ERROR(check_dims(d.lhs_contracting, lhs.rank(), "lhs contracting"));
  MS_RETURN_IF_ERROR(check_dims(d.rhs_contracting, rhs.rank(), "rhs contracting"));
  MS_RETURN_IF_ERROR(check_dims(d.lhs_batch, lhs.rank(), "lhs batch"));
  MS_RETURN_IF_ERROR(check_dims(d.rhs_batch, rhs.rank(), "rhs batch"));
  if (d.lhs_batch.size() != d.rhs_batch.size()) {
    return InvalidArgument(
        "dot_general requires equal numbers of lhs_batch and rhs_batch dimensions, got "
        "lhs_batch ", DimsRepr(d.lhs_batch), " and rhs_batch ", DimsRepr(d.rhs_batch), ".");
  }
  if (d.lhs_contracting.size() != d.rhs_contracting.size()) {
    return InvalidArgument(
        "dot_general requires equal numbers of lhs_contracting and rhs_contracting "
        "dimensions, got ", DimsRepr(d.lhs_contracting), " and ",
        DimsRepr(d.rhs_contracting), ".");
  }
  for (const auto& [side, batch, contracting] :
       {std::tie("lhs", d.lhs_batch, d.lhs_contracting),
        std::tie("rhs", d.rhs_batch, d.rhs_contracting)}) {
    for (int64_t b : batch) {
      if (std::count(contracting.begin(), contracting.end(), b)) {
        return InvalidArgument("dot_general requires ", side,
                               " batch dimensions to be disjoint from contracting dimensions, "
                               "got ", side, "_batch ", DimsRepr(batch), " and ", side,
                               "_contracting ", DimsRepr(contracting), ".");
      }
    }
  }
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.shape[d.lhs_batch[i]] != rhs.shape[d.rhs_batch[i]]) {
      return InvalidArgument(
          "dot_general requires lhs batch dimensions and rhs batch dimensions to have the "
          "same shape, got ", lhs.shape[d.lhs_batch[i]], " and ", rhs.shape[d.rhs_batch[i]],
          " at batch pair ", i, ".");
    }
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (lhs.shape[d.lhs_contracting[i]] != rhs.shape[d.rhs_contracting[i]]) {
      return InvalidArgument(
          "dot_general requires contracting dimensions to have the same shape, got ",
          lhs.shape[d.lhs_contracting[i]], " and ", rhs.shape[d.rhs_contracting[i]],
          " at contracting pair ", i, ".");
    }
  }
  return absl::OkStatus();
}

std::vector<int> FreeDims(int rank, const std::vector<int64_t>& contracting,
                          const std::vector<int64_t>& batch) {
  std::vector<int> free;
  for (int i = 0; i < rank; ++i) {
    if (std::count(contracting.begin(), contracting.end(), i) == 0 &&
        std::count(batch.begin(), batch.end(), i) == 0) {
      free.push_back(i);
    }
  }
  return free;
}

Entries Pick(const Entries& entries, const std::vector<int64_t>& dims) {
  Entries out;
  for (int64_t d : dims) out.push_back(entries[d]);
  return out;
}

// _dot_general_unreduced_rule.
absl::Status CheckUnreduced(const ArrayType& lhs, const ArrayType& rhs,
                            const Entries& lhs_contracting_spec,
                            const Entries& rhs_contracting_spec,
                            const std::optional<PartitionSpec>& out) {
  if (!lhs.spec().unreduced().empty() || !rhs.spec().unreduced().empty()) {
    return InvalidArgument("lhs or rhs passed to dot_general cannot be unreduced. Got lhs=",
                           lhs.ToString(true), " and rhs=",
                           rhs.ToString(true));
  }
  if (!out.has_value() || out->unreduced().empty()) return absl::OkStatus();
  if (lhs_contracting_spec != rhs_contracting_spec) {
    return InvalidArgument(
        "lhs and rhs contracting dims should be sharded identically when out_sharding "
        "provided to dot_general mentions unreduced_axes. Got lhs_contracting_spec=",
        EntriesTupleRepr(lhs_contracting_spec),
        ", rhs_contracting_spec=", EntriesTupleRepr(rhs_contracting_spec));
  }
  absl::flat_hash_set<std::string> contracting_axes;
  for (const Entry& e : lhs_contracting_spec) contracting_axes.insert(e.begin(), e.end());
  absl::flat_hash_set<std::string> unreduced(out->unreduced().begin(), out->unreduced().end());
  if (unreduced != contracting_axes) {
    return InvalidArgument(
        "out_sharding's unreduced axes should be equal to the contracting specs. Got "
        "unreduced axes={", absl::StrJoin(out->unreduced(), ", "),
        "} and contracting spec=", EntriesTupleRepr(lhs_contracting_spec));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArrayType> DotGeneralRule(const ArrayType& lhs, const ArrayType& rhs,
                                         const DotDimensionNumbers& dims,
                                         const std::optional<PartitionSpec>& out_sharding,
                                         std::optional<DType> out_dtype) {
  MS_RETURN_IF_ERROR(CheckDotShapes(lhs, rhs, dims));
  const DType dtype = out_dtype.value_or(lhs.dtype);
  std::vector<int> lhs_free = FreeDims(lhs.rank(), dims.lhs_contracting, dims.lhs_batch);
  std::vector<int> rhs_free = FreeDims(rhs.rank(), dims.rhs_contracting, dims.rhs_batch);
  rules::Shape shape;
  for (int64_t b : dims.lhs_batch) shape.push_back(lhs.shape[b]);
  for (int f : lhs_free) shape.push_back(lhs.shape[f]);
  for (int f : rhs_free) shape.push_back(rhs.shape[f]);
  const ArrayType* operands[] = {&lhs, &rhs};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("dot_general", operands));

  std::optional<PartitionSpec> out;
  if (out_sharding.has_value()) {
    MS_ASSIGN_OR_RETURN(out, rules::ParseOutSharding("dot_general", mesh, *out_sharding,
                                                     static_cast<int>(shape.size())));
  }
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(dtype, std::move(shape), mesh, operands);
  }
  const Entries l = rules::ExplicitEntries(lhs);
  const Entries r = rules::ExplicitEntries(rhs);
  const Entries lhs_contracting_spec = Pick(l, dims.lhs_contracting);
  const Entries rhs_contracting_spec = Pick(r, dims.rhs_contracting);
  if (out.has_value()) {
    MS_RETURN_IF_ERROR(
        CheckUnreduced(lhs, rhs, lhs_contracting_spec, rhs_contracting_spec, out));
    return rules::FinishResult("dot_general", operands, dtype, std::move(shape), mesh,
                               out->entries(), out->unreduced());
  }
  const Entries lhs_batch_spec = Pick(l, dims.lhs_batch);
  const Entries rhs_batch_spec = Pick(r, dims.rhs_batch);
  if (lhs_batch_spec != rhs_batch_spec) {
    return InvalidArgument(
        "dot_general requires lhs batch dimensions and rhs batch dimensions to have the "
        "same sharding, got ", EntriesTupleRepr(lhs_batch_spec), " and ",
        EntriesTupleRepr(rhs_batch_spec),
        ". (Newer JAX: dot_general requires lhs batch dimensions and rhs batch dimensions "
        "to have the consistent sharding.)");
  }
  for (size_t i = 0; i < lhs_contracting_spec.size(); ++i) {
    if (!lhs_contracting_spec[i].empty() && !rhs_contracting_spec[i].empty()) {
      return InvalidArgument(
          "Contracting dimensions are sharded and it is ambiguous how the output should "
          "be sharded. Please specify the output sharding via the `out_sharding` "
          "parameter. Got lhs_contracting_spec=",
          EntriesTupleRepr(lhs_contracting_spec),
          " and rhs_contracting_spec=", EntriesTupleRepr(rhs_contracting_spec),
          lhs_contracting_spec[i] == rhs_contracting_spec[i]
              ? ""
              : " (dot_general requires contracting dimensions to have consistent "
                "sharding)");
    }
  }
  MS_RETURN_IF_ERROR(
      CheckUnreduced(lhs, rhs, lhs_contracting_spec, rhs_contracting_spec, std::nullopt));
  Entries result = lhs_batch_spec;
  for (int f : lhs_free) result.push_back(l[f]);
  for (int f : rhs_free) result.push_back(r[f]);
  return rules::FinishResult("dot_general", operands, dtype, std::move(shape), mesh,
                             std::move(result));
}

}  // namespace meshserve
