// The suggest cost figures (cost_figures.h) of a running cluster: the
// calibration its workers measured (server/worker/calibration.h) as reported
// by ClusterService.Status, the median over the workers that report one.
//
//   gemm_gflops_{one_row,small_m,large_m}, memory_bytes_per_s:
//       median over reporting workers (mean of the middle two for an even
//       count); a worker reports once its gemm_gflops_large_m is > 0;
//   link_bytes_per_s: median over the workers reporting one (calibration.h's
//       loopback link, Status field 15), else `defaults`';
//   hop_ms: `defaults`' (the workers' field 14 is loopback TCP's floor, far
//       below a gRPC round; not used until measured over the peer transport);
//   host_cores: the fewest cores a healthy worker reports; workers_per_host:
//       the most healthy workers at one address host; threads_per_worker:
//       the most BLAS threads a worker reports (each kept from `defaults`
//       when no worker reports it);
//   request_overhead_ms, small_m_max_rows: `defaults`';
//   source = "target" .
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_SUGGEST_TARGET_FIGURES_H_
#define MESHSERVE_SERVER_SUGGEST_TARGET_FIGURES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/cluster_service.pb.h"
#include "server/suggest/cost_figures.h"

namespace meshserve {

// How many workers of `status` report calibration figures.
int64_t WorkersWithFigures(const ClusterStatusResponse& status);

// \error kUnavailable: no worker reports figures (the count of workers named);
//   kInvalidArgument: a reporting worker's figure is not a positive finite
//   number (worker id and figure named).
absl::StatusOr<CostFigures> FiguresFromClusterStatus(const ClusterStatusResponse& status,
                                                     const CostFigures& defaults);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_TARGET_FIGURES_H_
