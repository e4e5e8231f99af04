// The layout search as dynamic programming over the layer graph (issue 35
// item 3): exact for the decomposed prediction (layer_costs.h), so it finds
// the layout exhaustive search finds, in time linear in the layers.
//
// The model's layers are visited in file order (a topological order). The
// state after layer i is
//   (option of every open role, type of every live value at every shape)
// where a role is open while a later layer reads one of its params or is one
// of its out layers (the inputs role stays open: the "batch" out_shardings
// follow it), and a value is live while a later layer reads it or it is an
// output. A residual add makes the graph more than a chain: the residual
// stream is simply a live value carried in the state until the add reads it.
// A transition decides the roles layer i first touches (its params' roles,
// its out role): for every combination of their options it types the layer
// alone (a one-layer model whose inputs are the live operands, with their
// types) under JAX's rules and adds its cost from LayerCostCache, plus the
// memory term of the params it reads first. Rejected combinations are
// dropped. States with equal keys have equal futures (a layer's typing and
// cost depend only on its operands' types and its own options), so keeping
// the cheapest is exact: the minimum over the final states (plus the outputs'
// gather) is the minimum over every layout of the space.
//
// Score: the mean over the shape sets of the predicted ms, as Suggest's.
// The memory cap is not a DP term: the caller checks the result.
//
// Thread-safety: pure function, but `costs` is mutated (one per search).
#ifndef MESHSERVE_SERVER_SUGGEST_DP_SEARCH_H_
#define MESHSERVE_SERVER_SUGGEST_DP_SEARCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"
#include "server/suggest/cost_model.h"
#include "server/suggest/layer_costs.h"
#include "server/suggest/layout_space.h"

namespace meshserve {

struct DpResult {
  Layout layout;        // roles no layer touches get option 0
  double mix_ms = 0;    // the DP's score (equals Suggest's for this layout)
  int64_t max_states = 0;  // the most states held after one layer
};

// The cheapest layout of `space` on `mesh`; nullopt when a step would hold
// more than `max_states` states, a live value is partial (no file spec
// expresses it), no layout types, or `stop` (checked per state) says so.
std::optional<DpResult> DpBestLayout(const ModelFile& model, const LayoutSpace& space,
                                     const Mesh& mesh, const std::vector<ShapeSet>& shapes,
                                     LayerCostCache& costs, int64_t max_states = 20000,
                                     const std::function<bool()>& stop = nullptr);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_DP_SEARCH_H_
