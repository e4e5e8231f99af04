// The suggest cost model: a layout's predicted time per request at one input
// shape, from the compiler's own plan (server/compiler/compiler.h) of the
// layout on N workers, one mesh device per worker.
//
//   predicted_ms = request_overhead
//                + s * sum over layers of LayerComputeMs
//                + bytes_per_request / (N * link_bytes_per_s)
//                + rounds * hop_ms
//                + s * param_bytes_per_worker / memory_bytes_per_s
//   LayerComputeMs = flops(busiest device) / rate(class)        a dot layer
//                  = 3 * local result bytes / memory_bytes_per_s  any other
// where s = HostSlowdown(figures, N) (cost_figures.h: workers sharing a
// host's cores), class is the GEMM's rows per device M (the layer result's
// local elements over its last dim): one row (M == 1), small (M <=
// small_m_max_rows) or large. An elementwise layer (silu, mul, add, norms,
// ...) streams its operands and writes its result: two reads and a write of
// its result's size (measured: at 256 rows the SwiGLU block's silu and mul
// are ~3% of the worker's time, the GEMMs ~90%). bytes_per_request is the plan's network bytes (every collective of
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
  // The terms: gemm_ms is every layer's LayerComputeMs (GEMMs and
  // elementwise layers), memory_ms the weight read, both times HostSlowdown.
  double gemm_ms = 0, network_ms = 0, memory_ms = 0;
  // The mesh and every value's type with axes of size 1 left out: layouts
  // with equal keys type (and so compile and serve) identically.
  std::string types_key;
};

// Compile options whose planner cost model is `figures`' link bandwidth and
// hop latency (hop_ms / 1e3 seconds).
CompileOptions CompileOptionsFor(const CostFigures& figures);

// max(1, min(N, workers_per_host) * threads_per_worker / host_cores); 1 when
// host_cores is 0 (unknown).
double HostSlowdown(const CostFigures& figures, int64_t num_workers);

// One layer's compute time on its busiest device at one core's rates (not yet
// times HostSlowdown): a dot's flops at its shape class's rate, or an
// elementwise layer's 3 x result bytes at memory bandwidth; 0 for the
// outputs' gather (no op). `result` is the layer's typed result (nullptr: a
// dot counts as one row, another layer as 0).
double LayerComputeMs(const LayerPlanInfo& layer, const ArrayType* result,
                      const CostFigures& figures);

// One layer's share of predicted_ms on `num_workers` workers, what `describe`
// shows per layer: HostSlowdown x LayerComputeMs + its collectives' bytes /
// (N x link) + their rounds x hop. Summed over a plan's layers, plus the
// inputs' and outputs' bytes / (N x link), the weight read and the request
// overhead, it is PredictAtShape's predicted_ms.
double LayerPredictedMs(const LayerPlanInfo& layer, const ArrayType* result,
                        const CostFigures& figures, int64_t num_workers);

// The typed model's params: the bytes of each one's local shard, summed.
int64_t ParamBytesPerDevice(const TypedModel& typed);

// Types `model` (already carrying the layout) on `mesh` at `shapes` and
// compiles it with device d on worker d.
// \error TypeModel's errors (JAX rejects the layout) and CompileModel's.
absl::StatusOr<Prediction> PredictAtShape(const ModelFile& model, const Mesh& mesh,
                                          const ShapeSet& shapes, const CostFigures& figures);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_COST_MODEL_H_
