// ResolveTensorBox (tensor_names.h): a model's or its checkpoint's tensor
// name and a box of it -> the param pieces it covers.
#include "server/coordinator/params/tensor_names.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

// A param's region in the tensor it reads: [from_offset, from_offset + shape).
Box SourceRegion(const ParamDef& p) {
  Box b = Box::FromShape(p.shape);
  for (int d = 0; d < b.rank(); ++d) {
    const int64_t o = d < static_cast<int>(p.from_offset.size()) ? p.from_offset[d] : 0;
    b[d] = {o, o + p.shape[d]};
  }
  return b;
}

Box BoxAt(absl::Span<const int64_t> offset, absl::Span<const int64_t> shape) {
  Box b = Box::FromShape(shape);
  for (int d = 0; d < b.rank(); ++d) b[d] = {offset[d], offset[d] + shape[d]};
  return b;
}

// The box [offset, offset + shape) of a tensor of `full`, defaults filled in.
absl::Status FillBox(const ModelFile& model, const std::string& name,
                     absl::Span<const int64_t> full, absl::Span<const int64_t> offset,
                     absl::Span<const int64_t> shape, ResolvedBox& r) {
  const size_t rank = full.size();
  if (!offset.empty() && offset.size() != rank) {
    return InvalidArgument("model '", model.name, "' tensor '", name, "' has rank ", rank,
                           " (shape ", ShapeToString(full), "); offset ", ShapeToString(offset),
                           " has ", offset.size(), " entries");
  }
  if (!shape.empty() && shape.size() != rank) {
    return InvalidArgument("model '", model.name, "' tensor '", name, "' has rank ", rank,
                           " (shape ", ShapeToString(full), "); box shape ", ShapeToString(shape),
                           " has ", shape.size(), " entries");
  }
  r.offset.assign(offset.begin(), offset.end());
  if (r.offset.empty()) r.offset.assign(rank, 0);
  r.shape.assign(shape.begin(), shape.end());
  for (size_t d = 0; d < rank && shape.empty(); ++d) r.shape.push_back(full[d] - r.offset[d]);
  for (size_t d = 0; d < rank; ++d) {
    if (!shape.empty() && shape[d] < 1) {
      return InvalidArgument("model '", model.name, "' tensor '", name, "': box shape ",
                             ShapeToString(shape), " has dim ", d, " = ", shape[d],
                             " (must be >= 1)");
    }
    if (r.offset[d] < 0 || r.shape[d] < 1 || r.offset[d] + r.shape[d] > full[d]) {
      return OutOfRange("model '", model.name, "' tensor '", name, "' of shape ",
                        ShapeToString(full), ": the box at offset ", ShapeToString(r.offset),
                        " of shape ", ShapeToString(r.shape),
                        " is not inside it (dim ", d, ")");
    }
  }
  return absl::OkStatus();
}

// `tensor` read by params (from == tensor): their extent, pieces, coverage.
absl::Status ResolveCheckpointTensor(const ModelFile& model, const std::string& tensor,
                                     absl::Span<const int64_t> offset,
                                     absl::Span<const int64_t> shape, ResolvedBox& r) {
  std::vector<const ParamDef*> readers;
  for (const ParamDef& p : model.params) {
    if (p.from == tensor) readers.push_back(&p);
  }
  if (readers.empty()) {
    return NotFound("model '", model.name, "' has no param or checkpoint tensor '", r.name,
                    "' (names: its params, the tensors their `from` reads, checkpoint_tied, "
                    "checkpoint_ignored)");
  }
  std::vector<Box> regions;
  int64_t read = 0;
  for (const ParamDef* p : readers) {
    Box region = SourceRegion(*p);
    if (region.rank() != static_cast<int>(readers[0]->shape.size())) {
      return FailedPrecondition("model '", model.name, "': params '", readers[0]->name,
                                "' and '", p->name, "' read tensor '", tensor,
                                "' with different ranks");
    }
    r.full_shape.resize(region.rank(), 0);
    for (int d = 0; d < region.rank(); ++d) {
      r.full_shape[d] = std::max(r.full_shape[d], region[d].end);
    }
    read += region.NumElements();
    regions.push_back(std::move(region));
  }
  const Box whole = Box::FromShape(r.full_shape);
  r.shape_known = read == whole.NumElements() && UncoveredElements(whole, regions) == 0;
  MS_RETURN_IF_ERROR(FillBox(model, r.name, r.full_shape, offset, shape, r));
  const Box want = BoxAt(r.offset, r.shape);
  for (size_t i = 0; i < readers.size(); ++i) {
    const Box inter = Intersect(regions[i], want);
    if (inter.IsEmpty()) continue;
    TensorPiece piece{readers[i]->name, readers[i]->dtype, inter, {}};
    for (int d = 0; d < inter.rank(); ++d) {
      piece.box[d] = {inter[d].begin - regions[i][d].begin, inter[d].end - regions[i][d].begin};
      piece.dst_offset.push_back(inter[d].begin - r.offset[d]);
    }
    r.pieces.push_back(std::move(piece));
  }
  r.uncovered = UncoveredElements(want, regions);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedBox> ResolveTensorBox(const ModelFile& model, absl::string_view name,
                                             absl::Span<const int64_t> offset,
                                             absl::Span<const int64_t> shape) {
  ResolvedBox r;
  r.name = std::string(name);
  r.tensor = r.name;
  if (std::find(model.checkpoint_ignored.begin(), model.checkpoint_ignored.end(), name) !=
          model.checkpoint_ignored.end() &&
      model.FindParam(name) == nullptr) {
    r.ignored = true;
    r.note = absl::StrCat("'", name, "' is a checkpoint tensor model '", model.name,
                          "' does not read (checkpoint_ignored): ignored");
    return r;
  }
  auto tied = model.checkpoint_tied.find(r.name);
  if (tied != model.checkpoint_tied.end() && model.FindParam(name) == nullptr) {
    r.tensor = tied->second;
    r.note = absl::StrCat("'", name, "' is tied to '", r.tensor, "' (checkpoint_tied)");
  }
  if (const ParamDef* p = model.FindParam(r.tensor)) {
    r.is_param = true;
    r.full_shape = p->shape;
    r.shape_known = true;
    MS_RETURN_IF_ERROR(FillBox(model, r.name, p->shape, offset, shape, r));
    r.pieces.push_back({p->name, p->dtype, BoxAt(r.offset, r.shape),
                        std::vector<int64_t>(r.offset.size(), 0)});
    return r;
  }
  MS_RETURN_IF_ERROR(ResolveCheckpointTensor(model, r.tensor, offset, shape, r));
  return r;
}

}  // namespace meshserve
