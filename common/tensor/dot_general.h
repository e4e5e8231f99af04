// DotGeneralInPlace: a dot_general whose weight is read in place from a
// float32 matrix inside someone else's buffer, rows `row_stride` elements
// apart (an LM head's slice of a replicated [V, d] table: rows [a, b) are
// contiguous, row_stride = d = cols; columns [a, b) of every row are strided,
// row_stride = d > cols). The rest of DotGeneral is in kernels.h.
//
//   out[m, n] = sum_k lhs[m, k] * W[n, k]   (w_contracting = 1: W is [N, K])
//   out[m, n] = sum_k lhs[m, k] * W[k, n]   (w_contracting = 0: W is [K, N])
// with lhs viewed as [M, K] (its last dim contracted) and out of shape
// lhs.shape[:-1] + [N]: jax.lax.dot_general(lhs, W, (([lhs.ndim-1],
// [w_contracting]), ((), ()))). A few rows (up to SmallMMaxRows, as
// DotGeneral, one row included: cblas_sgemv was 1.4-2.6x slower) are
// GemmSmallM reading W in place at its stride (cblas_sgemm would pack the
// whole slice on every call: a 16-row decode step's GPT-2 head slice is 77
// MB); more rows one cblas_sgemm, the stride as the leading dimension.
//
// Thread-safety: pure function (OpenBLAS threads).
#ifndef MESHSERVE_COMMON_TENSOR_DOT_GENERAL_H_
#define MESHSERVE_COMMON_TENSOR_DOT_GENERAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// A read-only [rows, cols] float32 matrix at `data`, row r at data + r *
// row_stride. Not owned: valid while its buffer lives.
struct StridedMatrix {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

// \error kInvalidArgument naming the shapes: lhs not a float type or of rank
//   0, w_contracting not 0 or 1, K differing between lhs and W, row_stride <
//   cols, sizes beyond the BLAS int range, a non-float out_dtype.
absl::StatusOr<Tensor> DotGeneralInPlace(const Tensor& lhs, const StridedMatrix& w,
                                         int64_t w_contracting, DType out_dtype);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_DOT_GENERAL_H_
