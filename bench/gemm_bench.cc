// DotGeneral (OpenBLAS sgemm) against a naive loop, in GFLOP/s.
//
//   build/bin/gemm_bench                         # picks the BLAS core by CPUID (re-exec)
//   MESHSERVE_BLAS_CORETYPE=Haswell build/bin/gemm_bench   # force a core
//   MESHSERVE_BLAS_CHOSEN=x OPENBLAS_CORETYPE=Prescott build/bin/gemm_bench  # no re-exec
//
// Each benchmark reports a "GFLOP/s" counter (2*M*N*K per iteration), so the
// ratio between the BLAS path and the naive reference reads off one run, and
// "GFLOP/cpu_s" (per process CPU-second, all threads), which stays meaningful
// when the machine is oversubscribed. The
// context line "blas" shows the OpenBLAS core actually loaded.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <ctime>
#include <vector>

#include "bench/bench_process.h"
#include "bench/random_tensor.h"
#include "common/base/logging.h"
#include "common/tensor/blas.h"
#include "common/tensor/kernels.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace {

// Process CPU seconds (all threads): on a shared, oversubscribed machine
// GFLOP per CPU-second is stable where wall-clock GFLOP/s is not.
double ProcessCpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

void SetGflops(benchmark::State& state, double m, double n, double k, double cpu_seconds) {
  const double gflop = 2.0 * m * n * k / 1e9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/cpu_s"] =
      cpu_seconds > 0 ? gflop * static_cast<double>(state.iterations()) / cpu_seconds : 0.0;
}

// x[M, K] . w[K, N] with w in `weight_dtype` (widened to f32 per call).
void RunDot(benchmark::State& state, DType weight_dtype, DType out_dtype) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor x = RandomTensor(DType::kFloat32, {m, k});
  const Tensor w = RandomTensor(weight_dtype, {k, n});
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    absl::StatusOr<Tensor> y = DotGeneral(x, w, {1}, {0}, {}, {}, out_dtype);
    MS_CHECK(y.ok()) << y.status();
    benchmark::DoNotOptimize(y->raw_data());
  }
  SetGflops(state, m, n, k, ProcessCpuSeconds() - cpu_start);
}

void BM_DotGeneralF32(benchmark::State& state) {
  RunDot(state, DType::kFloat32, DType::kFloat32);
}
void BM_DotGeneralBf16Weights(benchmark::State& state) {
  RunDot(state, DType::kBFloat16, DType::kBFloat16);
}

// A batched, transposed case: 'bqd,bkd->bqk' (attention scores).
void BM_DotGeneralBatchedTransposed(benchmark::State& state) {
  const int64_t b = state.range(0), q = state.range(1), d = state.range(2);
  const Tensor x = RandomTensor(DType::kFloat32, {b, q, d});
  const Tensor y = RandomTensor(DType::kFloat32, {b, q, d});
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    absl::StatusOr<Tensor> s = DotGeneral(x, y, {2}, {2}, {0}, {0}, DType::kFloat32);
    MS_CHECK(s.ok()) << s.status();
    benchmark::DoNotOptimize(s->raw_data());
  }
  SetGflops(state, static_cast<double>(b) * q, q, d, ProcessCpuSeconds() - cpu_start);
}

// The reference: i-k-j triple loop in float32.
void BM_NaiveGemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor x = RandomTensor(DType::kFloat32, {m, k});
  const Tensor w = RandomTensor(DType::kFloat32, {k, n});
  std::vector<float> out(static_cast<size_t>(m * n));
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 0.0f);
    const float* a = x.data<float>();
    const float* b = w.data<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const float av = a[i * k + p];
        for (int64_t j = 0; j < n; ++j) out[i * n + j] += av * b[p * n + j];
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  SetGflops(state, m, n, k, ProcessCpuSeconds() - cpu_start);
}

// [8*512, 2048] x [2048, 8192] is the SwiGLU up-projection of the example
// model; the smaller sizes keep a run short on a shared machine. M = 8 is a
// small serving batch, where widening bf16 weights per call shows most.
BENCHMARK(BM_DotGeneralF32)
    ->Args({8, 2048, 8192})
    ->Args({512, 512, 512})
    ->Args({1024, 2048, 2048})
    ->Args({4096, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DotGeneralBf16Weights)
    ->Args({8, 2048, 8192})
    ->Args({1024, 2048, 2048})
    ->Args({4096, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DotGeneralBatchedTransposed)->Args({16, 256, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NaiveGemm)->Args({256, 256, 256})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  meshserve::SetUpBenchProcess(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas", meshserve::BlasConfig());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
