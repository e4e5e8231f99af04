// The suggest prediction (cost_model.h) decomposed by layer and memoized, so
// a search compiles each layer once per distinct signature instead of the
// whole model once per layout.
//
// The compiler (server/compiler/compiler.cc) plans each layer from its
// operands' types and its result's type alone, so PredictAtShape's figures
// are sums of per-layer terms:
//   predicted_ms = overhead + sum_l [s compute_ms(l) + bytes(l) / (N link) + rounds(l) hop]
//                + (input + output bytes) / (N link) + gather terms of the outputs
//                + s param bytes per worker / memory bandwidth
// (compute_ms: cost_model.h's LayerComputeMs; s: its HostSlowdown)
// where a layer's terms depend only on its signature: (mesh, the layer's role
// key (RoleKey of its name: tied layers share it), each operand's role key and
// type, the result's type). A layer's terms are found by compiling a one-layer
// model whose inputs are the layer's non-param operands with their types;
// the outputs' gather (a partial output is reduced) likewise, per output
// type. Predict types the whole model (cheap next to compiling), looks every
// layer up and compiles only the signatures it has not seen.
//
// LayerTerms (one layer's cost at given operand types) is also the transition
// cost of the DP search (dp_search.h).
//
// Thread-safety: a LayerCostCache is not thread-safe (one per search).
#ifndef MESHSERVE_SERVER_SUGGEST_LAYER_COSTS_H_
#define MESHSERVE_SERVER_SUGGEST_LAYER_COSTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/model/typed_model.h"
#include "common/sharding/mesh.h"
#include "server/suggest/cost_figures.h"
#include "server/suggest/cost_model.h"

namespace meshserve {

// One layer's (or the outputs' gather's) share of a Prediction.
struct LayerTerms {
  double compute_ms = 0;  // LayerComputeMs (cost_model.h), before HostSlowdown
  int64_t bytes = 0;
  int64_t rounds = 0;
  // HostSlowdown x compute_ms + bytes / (N link) + rounds hop, in ms.
  double Ms(const CostFigures& f, int64_t num_devices) const;
};

class LayerCostCache {
 public:
  explicit LayerCostCache(CostFigures figures) : figures_(std::move(figures)) {}

  // PredictAtShape's result (same figures up to float rounding), from cached
  // per-layer terms. \error TypeModel's errors, and a layer no strategy plans.
  absl::StatusOr<Prediction> Predict(const ModelFile& model, const Mesh& mesh,
                                     const ShapeSet& shapes);

  // `layer`'s terms with its operands and result typed as in `typed`.
  absl::StatusOr<LayerTerms> Layer(const TypedModel& typed, const LayerDef& layer);
  // The gather of output `name` (typed in `typed`); zero unless it is partial.
  absl::StatusOr<LayerTerms> Gather(const TypedModel& typed, const std::string& name);

  const CostFigures& figures() const { return figures_; }
  int64_t num_compiles() const { return num_compiles_; }

 private:
  absl::StatusOr<LayerTerms> CompileOne(const TypedModel& typed, const LayerDef* layer,
                                        const std::string& gathered);

  CostFigures figures_;
  std::map<std::string, LayerTerms> cache_;
  int64_t num_compiles_ = 0;
};

// The values a layer reads, as the compiler lists them: its inputs, then
// kernel, table, scale, bias and where when set.
std::vector<std::string> LayerOperands(const LayerDef& layer);

// The typed model's types as one key (axes of size 1 dropped by the type
// strings being the mesh's): layouts with equal keys compile identically.
std::string TypesKeyOf(const TypedModel& typed);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_LAYER_COSTS_H_
