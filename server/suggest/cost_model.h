// The suggest cost model: a layout's predicted time per request at one input
// shape, from the compiler's own plan (server/compiler/compiler.h) of the
// layout on N workers, one mesh device per worker.
//
//   predicted_ms = request_overhead
//                + sum over dot layers of  flops(busiest device) / rate(class)
//                + bytes_per_request / (N * link_bytes_per_s)
//                + rounds * hop_ms
//                + param_bytes_per_worker / memory_bytes_per_s
// where class is the GEMM's rows per device M (the layer result's local
// elements over its last dim): one row (M == 1), small (M <= small_m_max_rows)
// or large; bytes_per_request is the plan's network bytes (every collective of
// every layer, at worker granularity) and the inputs scattered to and the
// outputs gathered from the workers; rounds sums the planner's rounds of peer
// messages over every collective (1 for a direct one, 2 for a two-phase
// all-reduce, 0 for a local one; each is one exchange the workers wait for).
// The compile uses the same link bandwidth and hop latency (CompileOptionsFor)
// to choose each collective's form, so one set of figures prices both. The network
// term assumes each worker sends its 1/N share at once; the param term is the
// one-row GEMM's memory-bound weight read (every resident param read once).
//
// param_bytes_per_worker is exact: the sum of each param's local shard
// (typed with JAX's rules; even shards, one device per worker).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_SUGGEST_COST_MODEL_H_
#define MESHSERVE_SERVER_SUGGEST_COST_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/model/typed_model.h"
#include "common/sharding/mesh.h"
#include "server/compiler/compiler.h"
#include "server/suggest/cost_figures.h"

namespace meshserve {

using ShapeSet = std::map<std::string, std::vector<int64_t>>;  // input -> full shape

struct Prediction {
  double predicted_ms = 0;
  int64_t bytes_per_request = 0;
  int64_t rounds = 0;
  int64_t param_bytes_per_worker = 0;
  double gemm_ms = 0, network_ms = 0, memory_ms = 0;  // the terms
  // The mesh and every value's type with axes of size 1 left out: layouts
  // with equal keys type (and so compile and serve) identically.
  std::string types_key;
};

// Compile options whose planner cost model is `figures`' link bandwidth and
// hop latency (hop_ms / 1e3 seconds).
CompileOptions CompileOptionsFor(const CostFigures& figures);

// The typed model's params: the bytes of each one's local shard, summed.
int64_t ParamBytesPerDevice(const TypedModel& typed);

// Types `model` (already carrying the layout) on `mesh` at `shapes` and
// compiles it with device d on worker d.
// \error TypeModel's errors (JAX rejects the layout) and CompileModel's.
absl::StatusOr<Prediction> PredictAtShape(const ModelFile& model, const Mesh& mesh,
                                          const ShapeSet& shapes, const CostFigures& figures);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_COST_MODEL_H_
