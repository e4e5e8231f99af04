// The cost figures of a running cluster (target_figures.h).
#include "server/suggest/target_figures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
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

// "host" of "host:port" (the whole address without a ':').
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// workers_per_host, host_cores and threads_per_worker from every worker's
// address, cores and BLAS threads (cost_figures.h: host sharing).
void SetHostSharing(const ClusterStatusResponse& status, CostFigures* out) {
  std::map<std::string, int64_t> per_host;
  int64_t cores = 0, threads = 0;
  for (const ClusterStatusResponse::Worker& w : status.workers()) {
    if (!w.healthy()) continue;
    ++per_host[HostOf(w.address())];
    if (w.cores() > 0) cores = cores == 0 ? w.cores() : std::min<int64_t>(cores, w.cores());
    threads = std::max<int64_t>(threads, w.blas_threads());
  }
  for (const auto& [host, n] : per_host) out->workers_per_host = std::max(out->workers_per_host, n);
  if (cores > 0) out->host_cores = cores;
  if (threads > 0) out->threads_per_worker = threads;
}

// link_bytes_per_s: the median over the workers that report a link (the
// defaults' when none does). Their hop_ms is not taken: it is loopback TCP's
// floor (~3 us one way here), ~60x below a gRPC round of peer messages, so
// the hop stays the defaults' until it is measured over the peer transport.
void SetLink(const ClusterStatusResponse& status, CostFigures* out) {
  std::vector<double> links;
  for (const ClusterStatusResponse::Worker& w : status.workers()) {
    if (w.link_bytes_per_s() > 0 && std::isfinite(w.link_bytes_per_s())) {
      links.push_back(w.link_bytes_per_s());
    }
  }
  if (!links.empty()) out->link_bytes_per_s = Median(std::move(links));
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
  SetLink(status, &out);
  SetHostSharing(status, &out);
  return out;
}

}  // namespace meshserve
