// The figures the suggest cost model (cost_model.h) prices a layout with: GEMM
// rates by shape class, link bandwidth, per-hop latency, memory bandwidth.
//
// The defaults were measured on this machine class (2 SkylakeX cores,
// OpenBLAS, workers talking over loopback gRPC):
//   large-M GEMM (M > small_m_max_rows)   ~150 GFLOP/s per core
//   small-M GEMM (2..small_m_max_rows)    ~40 GFLOP/s (packing dominates)
//   one-row GEMM (M == 1)                 memory-bound: its time is the
//       weight read (param bytes / memory bandwidth, counted separately), so
//       its flop rate here only prices the arithmetic on top (~20 GFLOP/s)
//   loopback                              ~1.7 GB/s per sending thread
//   one hop (a round of peer messages)    ~0.2 ms
//   memory bandwidth                      ~10 GB/s per core
// The link and hop defaults are the reshard planner's (CollectiveCostModel,
// common/sharding/reshard_plan.h), kept in that one place.
// A cluster's calibration (server/worker/calibration.h, via
// target_figures.h) fills the same struct; nothing here reads a flag or a file.
//
// Rates are per core: the calibration measures them per CPU-second. Workers
// sharing a host share its cores: with w = min(N, workers_per_host) workers
// of t BLAS threads each on a host of host_cores cores, every compute term
// (GEMMs, elementwise layers, the weight read) takes
//   HostSlowdown = max(1, w t / host_cores)
// times longer (host_cores = 0: unknown, no slowdown). Load from other
// processes on the host is not priced.
//
// Thread-safety: a plain value.
#ifndef MESHSERVE_SERVER_SUGGEST_COST_FIGURES_H_
#define MESHSERVE_SERVER_SUGGEST_COST_FIGURES_H_

#include <cstdint>
#include <string>

#include "common/sharding/reshard_plan.h"

namespace meshserve {

struct CostFigures {
  double gemm_gflops_one_row = 20.0;   // per worker, M == 1
  double gemm_gflops_small_m = 40.0;   // per worker, 2 <= M <= small_m_max_rows
  double gemm_gflops_large_m = 150.0;  // per worker, M > small_m_max_rows
  int64_t small_m_max_rows = 16;
  double link_bytes_per_s = CollectiveCostModel{}.link_bytes_per_s;  // one worker's sends
  double hop_ms = CollectiveCostModel{}.hop_s * 1e3;  // one round of peer messages
  double memory_bytes_per_s = 10e9;    // one worker reading its params
  // Host sharing (above): 0 = unknown (no slowdown); workers_per_host 0 = all
  // the N workers on one host.
  int64_t host_cores = 0;
  int64_t workers_per_host = 0;
  int64_t threads_per_worker = 1;
  // The coordinator's part of every request (decode, fan-out, gather): two
  // hops, independent of the layout.
  double request_overhead_ms = 0.4;
  // "defaults" for these figures; a calibration names its source.
  std::string source = "defaults";
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_COST_FIGURES_H_
