// The vectorised activation kernels (common/tensor/activations.h) and the
// elementwise Tensor kernels against the scalar libm loops they replaced,
// each a ratio of times measured in this process, candidate and baseline
// alternating call by call (so machine load hits both alike). Prints one
// markdown table (docs/kernels.md).
//
//   build/bin/activation_bench          # < 10 s
//
// Rows (n: elements per call; GPT-2 small at 128 tokens on 2 workers: the
// MLP activation shard is 128 x 1536, the residual 128 x 768, an attention
// score row 128 long):
//   gelu tanh   scalar 0.5 x (1 + tanhf(u)) vs GeluTanhF32 per ISA
//   silu        scalar x / (1 + expf(-x)) vs SiluF32 per ISA
//   softmax row scalar max / expf / divide vs SoftmaxRowF32 per ISA
//   Gelu()      the old Tensor path (zeroed output, scalar tanhf) vs Gelu()
//   Add bias    the old broadcast loop (strided inner loop) vs Add()
// "x" = baseline time / candidate time (> 1: the new kernel is faster).
// Times: the fastest call of the rounds, in thread CPU time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_process.h"
#include "common/tensor/activations.h"
#include "common/tensor/gemm_small_m.h"
#include "common/tensor/kernels.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace {

double ThreadSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Best times of `base` and `cand`, alternating, over `rounds` calls each.
std::pair<double, double> Race(const std::function<void()>& base,
                               const std::function<void()>& cand, int rounds) {
  double b = 1e30, c = 1e30;
  for (int r = 0; r < rounds; ++r) {
    double start = ThreadSeconds();
    base();
    b = std::min(b, ThreadSeconds() - start);
    start = ThreadSeconds();
    cand();
    c = std::min(c, ThreadSeconds() - start);
  }
  return {b, c};
}

void PrintRow(const std::string& what, const std::string& isa, int64_t n,
              std::pair<double, double> t) {
  std::printf("| %s | %s | %lld | %.1f | %.1f | %.2f | %.2f |\n", what.c_str(), isa.c_str(),
              static_cast<long long>(n), t.first * 1e6, t.second * 1e6, t.first * 1e9 / n,
              t.first / t.second);
}

std::vector<float> Normal(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void ScalarGelu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  }
}

void ScalarSilu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void ScalarSoftmax(const float* x, int64_t n, float* y) {
  float mx = -INFINITY, sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  for (int64_t i = 0; i < n; ++i) sum += (y[i] = std::exp(x[i] - mx));
  for (int64_t i = 0; i < n; ++i) y[i] /= sum;
}

using RowKernel = void (*)(const float*, int64_t, float*, SmallMIsa);

void KernelRows(const char* what, void (*scalar)(const float*, int64_t, float*),
                RowKernel kernel, int64_t n, int64_t rows_per_call) {
  const std::vector<float> x = Normal(n * rows_per_call, 2.0f, 1);
  std::vector<float> y(x.size());
  for (SmallMIsa isa : {SmallMIsa::kPortable, SmallMIsa::kAvx2, SmallMIsa::kAvx512}) {
    if (!SmallMIsaSupported(isa)) continue;
    const auto t = Race(
        [&] {
          for (int64_t r = 0; r < rows_per_call; ++r) scalar(&x[r * n], n, &y[r * n]);
        },
        [&] {
          for (int64_t r = 0; r < rows_per_call; ++r) kernel(&x[r * n], n, &y[r * n], isa);
        },
        30);
    PrintRow(what, SmallMIsaName(isa), n * rows_per_call, t);
  }
}

void TensorRows() {
  const std::vector<float> h = Normal(128 * 1536, 2.0f, 2);
  const Tensor x = *Tensor::FromValues(DType::kFloat32, {1, 128, 1536}, h);
  const char* isa = SmallMIsaName(DefaultSmallMIsa());
  PrintRow("Gelu() [1,128,1536]", isa, x.NumElements(),
           Race(
               [&] {
                 Tensor out = Tensor::Zeros(DType::kFloat32, x.shape());
                 ScalarGelu(x.data<float>(), x.NumElements(), out.data<float>());
               },
               [&] { (void)Gelu(x, DType::kFloat32); }, 30));
  const Tensor a = *Tensor::FromValues(DType::kFloat32, {1, 128, 768}, Normal(128 * 768, 1, 3));
  const Tensor bias = *Tensor::FromValues(DType::kFloat32, {768}, Normal(768, 1, 4));
  PrintRow("Add() [1,128,768]+[768]", "-", a.NumElements(),
           Race(
               [&] {  // the old path: zeroed output, strides read per element
                 Tensor out = Tensor::Zeros(DType::kFloat32, a.shape());
                 float* po = out.data<float>();
                 const float *pa = a.data<float>(), *pb = bias.data<float>();
                 volatile int64_t ia = 1, ib = 1;  // runtime strides, as the old loop had
                 for (int64_t r = 0; r < 128; ++r) {
                   for (int64_t j = 0; j < 768; ++j) {
                     po[r * 768 + j] = pa[r * 768 + j * ia] + pb[j * ib];
                   }
                 }
               },
               [&] { (void)Add(a, bias, DType::kFloat32); }, 30));
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  meshserve::SetUpBenchProcess(argv);
  std::printf("default ISA: %s; clock: thread CPU time, best of 30 calls each\n\n",
              meshserve::SmallMIsaName(meshserve::DefaultSmallMIsa()));
  std::printf("| kernel | ISA | n | scalar us | ours us | scalar ns/elem | x |\n"
              "|---|---|---|---|---|---|---|\n");
  meshserve::KernelRows("gelu tanh", meshserve::ScalarGelu, meshserve::GeluTanhF32, 128 * 1536,
                        1);
  meshserve::KernelRows("silu", meshserve::ScalarSilu, meshserve::SiluF32, 4096, 1);
  meshserve::KernelRows("softmax row 128", meshserve::ScalarSoftmax, meshserve::SoftmaxRowF32,
                        128, 128);
  meshserve::KernelRows("softmax row 1024", meshserve::ScalarSoftmax, meshserve::SoftmaxRowF32,
                        1024, 16);
  meshserve::TensorRows();
  return 0;
}
