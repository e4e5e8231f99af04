// The search space of `meshserve suggest`: which choices a model's layout is
// made of, tied by role, and how one point of the space becomes a model file.
//
// Axes. The model's own mesh axis names are kept (so every out_sharding the
// file writes stays meaningful): D, the "data" axis, is the axis the first
// input's dim 0 is sharded over in the file (else the first axis); M, the
// "model" axis, is the first other axis (none for a one-axis mesh). A mesh
// candidate gives D and M sizes d * m = N (every divisor d of N); any further
// axis gets size 1.
//
// Roles. A name's role is the name with every all-digit dot-separated
// component replaced by '#': "h.3.mlp.c_fc.weight" -> "h.#.mlp.c_fc.weight",
// so the params (and layers) of repeated blocks share one choice. Roles:
//   inputs         one for all inputs: the file's specs, dim 0 over D, or
//                  replicated;
//   param role     a spec per dim from {None, D, M}, each axis at most once
//                  (rank 2: 7 options; 1 + 2r + r(r-1) in general); when
//                  some param of the file says "sharding": "auto", only
//                  those are searched and the others keep the file's spec
//                  (one "file" option);
//   out role       per linear / einsum layer role: the file's out_sharding,
//                  none, "batch" (dim 0 as the inputs' dim 0, the rest None)
//                  or "batch + last dim over M".
// A Layout is one option index per role. Materialize writes it into a copy of
// the ModelFile (param / input shardings, layer out_shardings); the typing
// (TypeModel) is what decides whether JAX's rules accept it.
//
// Named layouts (hand-written baselines, NamedLayouts): replicated,
// data_parallel, fsdp (every rank >= 2 param's dim 0 over D), all with the
// "batch" out_sharding on every dot layer; megatron column-then-row and
// row-then-column (a linear whose input is split over M is "row": kernel
// P(M, None) and out_sharding batch; else "column": kernel P(None, M), a bias
// over M, no out_sharding or, where the file has one, batch + M); as_written
// (the file's specs, where the options can express them).
//
// Thread-safety: plain values and pure functions.
#ifndef MESHSERVE_SERVER_SUGGEST_LAYOUT_SPACE_H_
#define MESHSERVE_SERVER_SUGGEST_LAYOUT_SPACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"
#include "server/suggest/cost_model.h"

namespace meshserve {

enum class AxisRole { kNone, kData, kModel };

struct RoleOption {
  enum Kind { kSpec, kFile, kAbsent, kBatch, kBatchLastModel, kReplicated };
  Kind kind = kSpec;
  std::vector<AxisRole> dims;  // kSpec: one per dim
  std::string ToString() const;  // "P(D, None)", "file", "none", "batch", ...
};

struct Role {
  enum Kind { kInputs, kParam, kOut };
  Kind kind = kParam;
  std::string key;                   // the role name ("h.#.mlp.c_fc.weight")
  std::vector<std::string> members;  // params or layers (kOut) of the role
  std::vector<RoleOption> options;   // option 0 is the "neutral" one
};

struct LayoutSpace {
  std::string data_axis, model_axis;  // model_axis empty: one-axis mesh
  std::vector<Role> roles;
  // For each role, the roles of the out roles reading a param of it (kernel,
  // bias or operand), for joint moves of the search.
  std::vector<std::vector<int>> coupled;
  std::vector<Mesh> meshes;  // candidate meshes of N devices
  std::map<std::string, int> value_ranks;  // every input, param and layer
  double NumLayouts() const;  // product of option counts
};

using Layout = std::vector<int>;  // option index per role

struct NamedLayout {
  std::string name;
  Layout layout;
};

// "h.3.mlp.c_fc.weight" -> "h.#.mlp.c_fc.weight".
std::string RoleKey(absl::string_view name);

// \error kInvalidArgument for num_devices < 1, a model without mesh axes,
//   tied params of different ranks, or a file that does not type as written.
// `shapes` (optional: request dims of 1) are the inputs' shapes the file's
// own layout is typed at, for the ranks of its values.
absl::StatusOr<LayoutSpace> BuildLayoutSpace(const ModelFile& model, int64_t num_devices,
                                             const ShapeSet* shapes = nullptr);

// The named baselines of the file comment, as layouts of `space`.
std::vector<NamedLayout> NamedLayouts(const ModelFile& model, const LayoutSpace& space);

// `model` with `layout`'s specs on `mesh` (mesh_axes take its sizes).
ModelFile Materialize(const ModelFile& model, const LayoutSpace& space, const Layout& layout,
                      const Mesh& mesh);

// A canonical text of a materialized model's shardings (mesh, then every
// input's and param's spec and every out_sharding, with axes of size 1
// dropped): equal keys serve identically.
std::string LayoutKey(const ModelFile& materialized, const Mesh& mesh);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_LAYOUT_SPACE_H_
