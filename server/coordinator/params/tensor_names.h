// Names of the tensors a push puts and a pull reads: a model param, or a
// tensor of the checkpoint the model was imported from (the model file's
// `from` / `from_offset`, `checkpoint_tied`, `checkpoint_ignored`;
// common/model/model_file.h). ResolveTensorBox maps a box of such a tensor
// to the pieces of params it covers.
//
// The math. Param p reading tensor T is the box R_p = [from_offset_p,
// from_offset_p + shape_p) of T. A request box B = [offset, offset + shape)
// of T gives, for every p with R_p ∩ B non-empty, the piece
//     box (in p's coordinates)  = (R_p ∩ B) - from_offset_p
//     dst_offset (inside B)     = (R_p ∩ B).begin - offset
// e.g. GPT-2's c_attn.weight [d, 3d] feeds q, k, v at [0,0], [0,d], [0,2d]:
// the box offset [0, d/2], shape [d, d] is q's columns [d/2, d) at dst [0, 0]
// and k's columns [0, d/2) at dst [0, d/2]. A param name is the one piece
// B itself. T's shape is the per-dim maximum of from_offset_p + shape_p over
// the params reading it ("known" when those params tile it exactly, as the
// importer's fused tensors are); `uncovered` counts the elements of B no
// param reads (a pull cannot produce them; a put leaves them unread).
//
// Resolution order: a param name; a `checkpoint_ignored` name (no pieces,
// ignored, a note); a `checkpoint_tied` name (resolved as its twin, which
// is a param or a tensor a param reads); a tensor some param reads.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_TENSOR_NAMES_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_TENSOR_NAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"

namespace meshserve {

// One param's share of a requested box.
struct TensorPiece {
  std::string param;                // the model's param
  DType dtype = DType::kFloat32;    // the param's
  Box box;                          // in the param's global coordinates
  std::vector<int64_t> dst_offset;  // where the piece starts inside the requested box
};

struct ResolvedBox {
  std::string name;    // as asked
  std::string tensor;  // what it resolved to: the name, or a tied name's twin
  bool is_param = false;  // `tensor` is a param of the model
  bool ignored = false;   // a checkpoint_ignored name: no pieces
  std::string note;       // why ignored, or which twin a tied name reads
  // The tensor's shape (empty for an ignored name); shape_known is false when
  // the params reading a checkpoint tensor do not tile it exactly (then
  // full_shape is the extent they read).
  std::vector<int64_t> full_shape;
  bool shape_known = false;
  std::vector<int64_t> offset;  // the box (defaults filled in)
  std::vector<int64_t> shape;
  std::vector<TensorPiece> pieces;  // in the model's param order
  int64_t uncovered = 0;            // elements of the box no param reads
};

// Resolves `name` and the box [offset, offset + shape) of it (empty offset:
// the origin; empty shape: the whole tensor from offset). Pieces as in the
// file comment.
// \error kNotFound naming the name and the model for an unknown name;
//   kInvalidArgument for an offset or shape of the wrong rank (naming both
//   ranks) or a shape dim < 1; kOutOfRange naming offset, shape and the
//   tensor's shape for a box that is not inside the tensor.
absl::StatusOr<ResolvedBox> ResolveTensorBox(const ModelFile& model, absl::string_view name,
                                             absl::Span<const int64_t> offset,
                                             absl::Span<const int64_t> shape);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_TENSOR_NAMES_H_
