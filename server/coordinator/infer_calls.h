// The data side of one inference attempt (infer_pipeline.h): the request's
// inputs cut into one ExecuteCall per worker (each input slice a box of its
// input, copied out with ExtractBoxBytes), and the outputs assembled from the
// workers' results (each output box from one replica, written in place with
// InsertBoxBytes). Pure functions.
//
// Thread-safety: no state.
#ifndef MESHSERVE_SERVER_COORDINATOR_INFER_CALLS_H_
#define MESHSERVE_SERVER_COORDINATOR_INFER_CALLS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/program_cache.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// The bytes of `slices`' data.
int64_t SliceBytes(const std::vector<SliceIr>& slices);

// One Execute per worker with all of its input slices, cut from the request.
// \error kInternal when the plan slices an input the request lacks.
absl::StatusOr<std::map<int64_t, ExecuteCall>> BuildCalls(
    const CompiledPlan& plan, const std::map<std::string, const NamedTensor*>& inputs,
    const std::string& request_id, int64_t deadline_ms);

// The bytes of the output pieces each worker returns under `plan`.
std::map<int64_t, int64_t> OutputBytesByWorker(const CompiledPlan& plan);

// The requested outputs of `plan` (v.outputs), assembled from the workers'
// results. \error kInternal (a piece missing or of the wrong dtype),
// kInvalidArgument (a piece of the wrong size), each naming the worker.
absl::StatusOr<InferResponse> AssembleResponse(const ValidatedRequest& v,
                                               const InferRequest& request,
                                               const Placement& placement,
                                               const CompiledPlan& plan,
                                               const std::map<int64_t, ExecuteResult>& by_worker);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_INFER_CALLS_H_
