// `meshserve suggest`'s core: searches a model's layouts (layout_space.h) on N
// workers, scores each by predicted time per request (cost_model.h) and
// returns the best with its runners-up; SuggestedModelText writes the choice
// as a model file that serves unchanged on N workers.
//
// Search, per candidate mesh (every factorization of N over the data and
// model axes):
//   1. the named baselines (NamedLayouts) are evaluated first (a later layout
//      equal to one keeps its name);
//   2. exhaustive: when the space has at most `exhaustive_limit` layouts,
//      every one; otherwise the DP over the layer graph (dp_search.h: exact
//      for the prediction, not for a stack priced from block copies), then
//      coordinate descent from the best of it and the mesh's baselines
//      (or the all-neutral layout): each pass tries every option of
//      every role with the others fixed, and for a param role every option
//      jointly with every option of each out role reading it (a row kernel
//      needs its out_sharding), keeping the best, until a pass improves
//      nothing or `max_passes`.
// A layout is kept when JAX's rules type it at every input shape (TypeModel),
// the compiler plans it, and its param bytes per worker fit
// `memory_per_worker` (0: no limit). Score: the mean predicted ms over the
// input shapes (an equal-weight mix); ties go to fewer param bytes per worker.
// Layouts that serve identically (LayoutKey) are evaluated once, and of
// layouts typing identically (Prediction::types_key) or predicting the same
// figures on the same mesh only the first ranked is listed.
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_SERVER_SUGGEST_SUGGEST_H_
#define MESHSERVE_SERVER_SUGGEST_SUGGEST_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"
#include "server/suggest/cost_figures.h"
#include "server/suggest/cost_model.h"
#include "server/suggest/layout_space.h"

namespace meshserve {

struct SuggestOptions {
  int64_t num_workers = 0;
  std::vector<ShapeSet> input_shapes;  // >= 1, every input's full shape
  int64_t memory_per_worker = 0;       // param bytes per worker; 0: no limit
  CostFigures figures;
  double exhaustive_limit = 1024;  // layouts per mesh
  int max_passes = 4;
  // Beyond exhaustive_limit, the DP over the layer graph (dp_search.h) first,
  // holding at most this many states per layer (0: no DP); coordinate
  // descent then starts from its layout when it beats the baselines.
  int64_t dp_max_states = 20000;
  // Price from per-layer terms compiled once per signature (layer_costs.h);
  // false: compile every layout's model whole (the reference, slower).
  bool memoize_layers = true;
  // The search stops after this long (0: no limit); the baselines and the
  // layouts scored so far still count, and the method says it stopped.
  double max_search_s = 60;
  // A stack of >= 3 tied blocks is priced from 1- and 2-block copies
  // (block_stack.h); the listed layouts are then typed whole.
  bool price_blocks = true;
  int num_alternatives = 3;
};

struct Suggestion {
  std::string name;  // a baseline's ("fsdp", ...) or "search"
  Mesh mesh;
  ModelFile model;   // the layout applied (mesh sizes, specs, out_shardings)
  std::vector<Prediction> per_shape;  // one per input shape
  double mix_ms = 0;                  // mean predicted_ms over the shapes
  std::string key;                    // LayoutKey
  // "mesh[...]  x=P(...)  h.#.w=P(...)  y>P(...)": the specs, one line, one
  // entry per role (the first member's, named by the role).
  std::string LayoutText() const;
};

struct SuggestResult {
  Suggestion choice;
  std::vector<Suggestion> alternatives;  // the next best, best first
  std::vector<Suggestion> baselines;     // each named layout's best mesh, if kept
  // The named layouts kept on no mesh, with the reason on each mesh.
  std::vector<std::pair<std::string, std::vector<std::string>>> rejected_baselines;
  // "exhaustive", "dp + coordinate descent" or "coordinate descent", +
  // " (stopped at the N s budget)"
  std::string method;
  int64_t num_evaluated = 0;
  int64_t num_rejected_rules = 0;   // JAX's rules or the compiler said no
  int64_t num_rejected_memory = 0;  // over memory_per_worker
  double search_s = 0;
};

// \error kInvalidArgument: num_workers < 1, no input shapes, a shape set
//   missing an input or not matching its rank and fixed dims, or no layout
//   JAX's rules accept (the first rejection's message);
//   kResourceExhausted: every layout JAX accepts is over memory_per_worker
//   (the message gives the smallest param bytes per worker); kNotFound: a
//   shape for an input the model does not have.
absl::StatusOr<SuggestResult> Suggest(const ModelFile& model, const SuggestOptions& options);

// The original file's JSON with the suggestion's mesh sizes, input and param
// shardings and out_shardings; checkpoint paths relative to `out_dir` (the
// written file's folder, as `meshserve import --out_dir` writes them;
// absolute when out_dir is empty), so the file serves from there.
// \error kInvalidArgument if the original's text is not JSON.
absl::StatusOr<std::string> SuggestedModelText(const ModelFile& original,
                                               const Suggestion& suggestion,
                                               const std::string& out_dir = "");

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_SUGGEST_H_
