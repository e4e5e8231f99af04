// DotGeneral per shape class against raw OpenBLAS, and bfloat16 against
// float32 weights, each a ratio of times measured in this process, the
// candidate and its baseline alternating call by call (so machine load hits
// both alike). Prints one markdown table (docs/kernels.md).
//
//   build/bin/kernel_ratio_bench                 # threads=1 (a worker's default on 2 cores)
//   build/bin/kernel_ratio_bench --threads=2 --min_m=8 --max_m=64
//
// Shapes: x[M, K] . w[K, N] for M in {1, 4, 8, 16, 64, 1024} and (K, N) in
// {(2048, 8192) (SwiGLU gate/up shard), (8192, 2048) (down)}.
// Columns (times: the fastest call of the rounds, each call started with the
// caches emptied of its weights, in thread CPU time when --threads=1, else
// wall time):
//   ours      DotGeneral with float32 weights ("path": the kernel it picks
//             for float32 / bfloat16 weights)
//   sgemm     cblas_sgemm on the same buffers; "vs sgemm" = sgemm / ours
//             (> 1: ours is faster; the target is >= 0.95 where OpenBLAS is
//             the kernel)
//   sgemv     M = 1: cblas_sgemv; M = 8: cblas_sgemv once per row; "vs sgemv"
//             = sgemv / ours
//   bf16      DotGeneral with the weights in bfloat16; "bf16/f32" = bf16 / ours
//             (< 1: bf16 is faster; targets <= 0.65 at M = 1, <= 1.2 at M = 64)
#include <cblas.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_process.h"
#include "bench/random_tensor.h"
#include "common/base/logging.h"
#include "common/tensor/blas.h"
#include "common/tensor/gemm_small_m.h"
#include "common/tensor/kernels.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace {

// With one thread every call runs on the calling thread, so its CPU time
// (CLOCK_THREAD_CPUTIME_ID) is the measure: it leaves out the time the
// thread is descheduled on a shared, oversubscribed machine. More threads
// need the wall clock (CLOCK_MONOTONIC).
clockid_t g_clock = CLOCK_MONOTONIC;

double Seconds(const std::function<void()>& fn) {
  timespec start, end;
  clock_gettime(g_clock, &start);
  fn();
  clock_gettime(g_clock, &end);
  return static_cast<double>(end.tv_sec - start.tv_sec) + 1e-9 * (end.tv_nsec - start.tv_nsec);
}

// Reads a buffer larger than the last-level cache, untimed, before each
// timed call, so every call starts with its weights in memory, as in a worker
// whose shards (tens of MiB per layer) exceed the cache. Without it a call
// made right after another on the same weights finds part of them in L3
// (32 MiB here) and looks up to 1.5x faster than it would serve.
void EvictCaches() {
  static std::vector<float>* buffer = new std::vector<float>(size_t{96} << 18, 1.0f);
  float sum = 0;
  for (size_t i = 0; i < buffer->size(); i += 16) sum += (*buffer)[i];
  volatile float sink = sum;
  (void)sink;
}

// The fastest of each function's calls (the least disturbed one), each
// called in turn for `rounds` rounds after one warm-up call each.
std::vector<double> Interleaved(const std::vector<std::function<void()>>& fns, int rounds) {
  std::vector<std::vector<double>> times(fns.size());
  for (const auto& fn : fns) fn();
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      EvictCaches();
      times[i].push_back(Seconds(fns[i]));
    }
  }
  std::vector<double> out;
  for (auto& t : times) out.push_back(*std::min_element(t.begin(), t.end()));
  return out;
}

// The kernel DotGeneral picks (dot_general.cc UseSmallM), "f32 / bf16".
std::string PathName(int64_t m) {
  const std::string small = std::string("small-M ") + SmallMIsaName(DefaultSmallMIsa());
  const SmallMIsa isa = DefaultSmallMIsa();
  const std::string f32 =
      m == 1 ? "sgemv" : (m <= SmallMMaxRows(DType::kFloat32, isa) ? small : "sgemm");
  const std::string bf16 = m <= SmallMMaxRows(DType::kBFloat16, isa) ? small : "panels+sgemm";
  return f32 + " / " + bf16;
}

void Row(int64_t m, int64_t k, int64_t n) {
  const Tensor x = RandomTensor(DType::kFloat32, {m, k});
  const Tensor w = RandomTensor(DType::kFloat32, {k, n});
  const Tensor wb = RandomTensor(DType::kBFloat16, {k, n});
  std::vector<float> c(static_cast<size_t>(m * n));
  auto dot = [&x](const Tensor& weights) {
    return [&x, &weights] {
      absl::StatusOr<Tensor> y = DotGeneral(x, weights, {1}, {0}, {}, {}, DType::kFloat32);
      MS_CHECK(y.ok()) << y.status();
    };
  };
  auto sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, x.data<float>(),
                static_cast<int>(k), w.data<float>(), static_cast<int>(n), 0.0f, c.data(),
                static_cast<int>(n));
  };
  auto sgemv_rows = [&] {
    for (int64_t i = 0; i < m; ++i) {
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(k), static_cast<int>(n), 1.0f,
                  w.data<float>(), static_cast<int>(n), x.data<float>() + i * k, 1, 0.0f,
                  c.data() + i * n, 1);
    }
  };
  std::vector<std::function<void()>> fns = {dot(w), sgemm, dot(wb)};
  if (m <= 8) fns.push_back(sgemv_rows);
  const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  const int rounds = flop > 1e10 ? 3 : (flop > 1e9 ? 7 : 25);
  const std::vector<double> t = Interleaved(fns, rounds);
  std::string sgemv_cols = "— | —";
  if (m <= 8) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3f | %.2f", t[3] * 1e3, t[3] / t[0]);
    sgemv_cols = buf;
  }
  std::printf("| %ld | %ld | %ld | %s | %.3f | %.1f | %.3f | %.2f | %s | %.3f | %.2f |\n",
              static_cast<long>(m), static_cast<long>(k), static_cast<long>(n),
              PathName(m).c_str(), t[0] * 1e3, flop / t[0] / 1e9, t[1] * 1e3, t[1] / t[0],
              sgemv_cols.c_str(), t[2] * 1e3, t[2] / t[0]);
  std::fflush(stdout);
}

int FlagValue(int argc, char** argv, const char* name, int fallback) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') {
      return std::atoi(argv[i] + len + 1);
    }
  }
  return fallback;
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  meshserve::SetUpBenchProcess(argv);
  const int threads = meshserve::FlagValue(argc, argv, "--threads", 1);
  const int min_m = meshserve::FlagValue(argc, argv, "--min_m", 1);
  const int max_m = meshserve::FlagValue(argc, argv, "--max_m", 1024);
  meshserve::SetBlasThreads(threads);
  if (threads == 1) meshserve::g_clock = CLOCK_THREAD_CPUTIME_ID;
  std::printf("blas: %s; small-M kernel: %s; clock: %s, best of the rounds\n\n",
              meshserve::BlasConfig().c_str(),
              meshserve::SmallMIsaName(meshserve::DefaultSmallMIsa()),
              threads == 1 ? "thread CPU time" : "wall");
  std::printf("| M | K | N | path | ours ms | GFLOP/s | sgemm ms | vs sgemm | sgemv ms | "
              "vs sgemv | bf16 ms | bf16/f32 |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t m : {1, 4, 8, 16, 32, 64, 128, 1024}) {
    if (m < min_m || m > max_m) continue;
    meshserve::Row(m, 2048, 8192);
    meshserve::Row(m, 8192, 2048);
  }
  return 0;
}
