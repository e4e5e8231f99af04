// RandomTensor: the benchmarks' inputs, uniform in [-1, 1) from a fixed seed,
// converted to the requested dtype (so bf16 and f32 weights hold the same
// values up to rounding).
//
// Thread-safety: pure function.
#ifndef MESHSERVE_BENCH_RANDOM_TENSOR_H_
#define MESHSERVE_BENCH_RANDOM_TENSOR_H_

#include <cstdint>
#include <random>
#include <vector>

#include "common/base/logging.h"
#include "common/tensor/tensor.h"

namespace meshserve {

inline Tensor RandomTensor(DType dtype, std::vector<int64_t> shape) {
  Tensor f = Tensor::Zeros(DType::kFloat32, shape);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t i = 0; i < f.NumElements(); ++i) f.data<float>()[i] = dist(rng);
  if (dtype == DType::kFloat32) return f;
  absl::StatusOr<Tensor> t = ConvertDType(f, dtype);
  MS_CHECK(t.ok()) << t.status();  // benchmark setup: shapes are constants
  return *std::move(t);
}

}  // namespace meshserve

#endif  // MESHSERVE_BENCH_RANDOM_TENSOR_H_
