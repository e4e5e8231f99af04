// Plan time of ComputeReshardPlan on 3-axis meshes of 64..1024 devices (one
// worker per device) and a 4-D tensor, per reshard kind. Run:
//   build/bin/plan_bench --benchmark_counters_tabular=true
// Counters: transfers (all kinds) and network transfers in the plan, and the
// TransferGroups that hold them (transfers differing only in destination).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "common/base/logging.h"
#include "common/sharding/reshard_plan.h"

namespace meshserve {
namespace {

// (x, y, z) for each device count.
Mesh BenchMesh(int64_t num_devices) {
  std::vector<int64_t> sizes;
  switch (num_devices) {
    case 32: sizes = {2, 4, 4}; break;
    case 64: sizes = {4, 4, 4}; break;
    case 128: sizes = {4, 4, 8}; break;
    case 256: sizes = {4, 8, 8}; break;
    case 512: sizes = {8, 8, 8}; break;
    case 1024: sizes = {8, 16, 8}; break;
    default: MS_CHECK(false);  // only the sizes above are benchmarked
  }
  return *Mesh::Create({{"x", sizes[0]}, {"y", sizes[1]}, {"z", sizes[2]}});
}

ReshardEndpoint BenchEndpoint(const Mesh& mesh, absl::string_view spec) {
  ReshardEndpoint ep;
  ep.sharding = *NamedSharding::Create(mesh, *ParsePartitionSpec(spec), 4);
  ep.device_workers = OneWorkerPerDevice(mesh);
  return ep;
}

const std::vector<int64_t> kShape = {4096, 4096, 256, 256};

void RunPlan(benchmark::State& state, const ReshardEndpoint& src,
             const ReshardEndpoint& dst, absl::string_view expected_pattern) {
  int64_t transfers = 0;
  int64_t network = 0;
  int64_t groups = 0;
  for (auto _ : state) {
    absl::StatusOr<ReshardPlan> plan =
        ComputeReshardPlan(kShape, DType::kBFloat16, src, dst);
    MS_CHECK(plan.ok());  // benchmark inputs are constants
    transfers = plan->NumTransfers();
    network = plan->NumNetworkTransfers();
    groups = static_cast<int64_t>(plan->groups.size());
    if (!absl::StartsWith(plan->pattern, expected_pattern)) {
      state.SkipWithError(("unexpected pattern " + plan->pattern).c_str());
    }
    benchmark::DoNotOptimize(plan);
  }
  state.counters["devices"] = static_cast<double>(src.sharding.mesh().num_devices());
  state.counters["transfers"] = static_cast<double>(transfers);
  state.counters["network"] = static_cast<double>(network);
  state.counters["groups"] = static_cast<double>(groups);
}

// One benchmark per reshard kind: the source spec on BenchMesh(n), the
// destination spec on BenchMesh(n) (BenchMesh(n / 2) when dst_halved), and the
// pattern ComputeReshardPlan must pick (a prefix: an all-reduce may be planned
// as "all-reduce (reduce-scatter + all-gather)").
struct PlanCase {
  const char* name;
  const char* src_spec;
  const char* dst_spec;
  const char* pattern;
  bool dst_halved;
};

const PlanCase kPlanCases[] = {
    // Gather x and y back: each device gathers the x*y shards of its z slice.
    {"BM_AllGather", "P(('x', 'y'), 'z', None, None)", "P(None, 'z', None, None)",
     "all-gather", false},
    // Full all-gather to replicated: devices^2 transfers, the output-bound worst case.
    {"BM_AllGatherFull", "P(('x', 'y', 'z'), None, None, None)", "P()", "all-gather", false},
    // Move x from dim 0 to dim 3.
    {"BM_AllToAll", "P('x', 'y', 'z', None)", "P(None, 'y', 'z', 'x')", "all-to-all", false},
    // Scale down: N devices on N workers -> N/2 devices on the first N/2 workers.
    {"BM_CrossMeshHalve", "P('x', 'y', 'z', None)", "P('x', 'y', 'z', None)",
     "general point-to-point", true},
    // Partial sums over z, scattered over z.
    {"BM_ReduceScatter", "P('x', 'y', None, None, unreduced={'z'})", "P('x', 'y', 'z', None)",
     "reduce-scatter", false},
    // Partial sums over z, summed everywhere.
    {"BM_AllReduce", "P('x', 'y', None, None, unreduced={'z'})", "P('x', 'y', None, None)",
     "all-reduce", false},
};

void BM_Plan(benchmark::State& state, const PlanCase& c) {
  const int64_t n = state.range(0);
  RunPlan(state, BenchEndpoint(BenchMesh(n), c.src_spec),
          BenchEndpoint(BenchMesh(c.dst_halved ? n / 2 : n), c.dst_spec), c.pattern);
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  for (const meshserve::PlanCase& c : meshserve::kPlanCases) {
    benchmark::RegisterBenchmark(c.name, meshserve::BM_Plan, c)
        ->Arg(64)
        ->Arg(128)
        ->Arg(256)
        ->Arg(512)
        ->Arg(1024)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
