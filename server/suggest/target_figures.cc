// The cost figures of a running cluster (target_figures.h).
#include "server/suggest/target_figures.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshserve {
namespace {

bool Reports(const ClusterStatusResponse::Worker& w) { return w.gemm_gflops_large_m() > 0; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int64_t WorkersWithFigures(const ClusterStatusResponse& status) {
  return std::count_if(status.workers().begin(), status.workers().end(), Reports);
}

absl::StatusOr<CostFigures> FiguresFromClusterStatus(const ClusterStatusResponse& status,
                                                     const CostFigures& defaults) {
  struct Figure {
    const char* name;
    double (ClusterStatusResponse::Worker::*get)() const;
    double CostFigures::*set;
  };
  const Figure figures[] = {
      {"gemm_gflops_one_row", &ClusterStatusResponse::Worker::gemm_gflops_one_row,
       &CostFigures::gemm_gflops_one_row},
      {"gemm_gflops_small_m", &ClusterStatusResponse::Worker::gemm_gflops_small_m,
       &CostFigures::gemm_gflops_small_m},
      {"gemm_gflops_large_m", &ClusterStatusResponse::Worker::gemm_gflops_large_m,
       &CostFigures::gemm_gflops_large_m},
      {"memory_bytes_per_s", &ClusterStatusResponse::Worker::memory_bytes_per_s,
       &CostFigures::memory_bytes_per_s},
  };
  if (WorkersWithFigures(status) == 0) {
    return absl::UnavailableError(absl::StrCat("none of the ", status.workers_size(),
                                               " workers reports calibration figures yet"));
  }
  CostFigures out = defaults;
  out.source = "target";
  for (const Figure& f : figures) {
    std::vector<double> values;
    for (const ClusterStatusResponse::Worker& w : status.workers()) {
      if (!Reports(w)) continue;
      const double v = (w.*f.get)();
      if (!std::isfinite(v) || v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("worker ", w.worker_id(), " reports ",
                                                       f.name, " = ", v,
                                                       ", not a positive finite number"));
      }
      values.push_back(v);
    }
    out.*f.set = Median(std::move(values));
  }
  return out;
}

}  // namespace meshserve
