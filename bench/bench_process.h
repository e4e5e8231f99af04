// The first lines of a benchmark's main: the process set up as the servers
// set themselves up (the mains read the environment; the libraries take
// options), so a bench measures the kernels the workers run.
//   OpenBLAS core type (MESHSERVE_BLAS_*, re-exec'ing once, common/tensor/blas.h),
//   the small-M GEMM ISA cap (MESHSERVE_GEMM_ISA), malloc tuned for the tensor
//   pool (common/tensor/buffer_pool.h).
//
// Thread-safety: call from main before other threads start.
#ifndef MESHSERVE_BENCH_BENCH_PROCESS_H_
#define MESHSERVE_BENCH_BENCH_PROCESS_H_

#include <cstdlib>

#include "common/tensor/blas.h"
#include "common/tensor/buffer_pool.h"
#include "common/tensor/gemm_small_m.h"

namespace meshserve {

inline void SetUpBenchProcess(char** argv) {
  BlasOptions blas = BlasOptionsFromEnvironment(std::getenv);
  EnsureBlasCoreTypeOrReexec(argv, &blas);
  if (const char* isa = std::getenv("MESHSERVE_GEMM_ISA")) SetSmallMIsaCap(isa);
  BufferPoolOptions pool;
  pool.tune_malloc = true;
  (void)ConfigureBufferPool(pool);
}

}  // namespace meshserve

#endif  // MESHSERVE_BENCH_BENCH_PROCESS_H_
