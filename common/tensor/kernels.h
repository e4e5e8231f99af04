// Compute kernels over host Tensors. Every kernel computes in float32
// (bfloat16/float16 inputs are widened exactly, float64 narrowed) and writes
// its result in the requested `out_dtype` (float32, bfloat16, float16 or
// float64; rounded once, to nearest even). Shapes are validated: any mismatch
// is kInvalidArgument naming the shapes (e.g. "Add: shapes [2, 3] and [4] do
// not broadcast"). Integer inputs are accepted only where stated.
//
// Semantics follow JAX:
//   DotGeneral  jax.lax.dot_general(lhs, rhs, ((lc, rc), (lb, rb)))
//               result dims = batch dims (in lhs_batch order), then lhs free
//               dims, then rhs free dims (each in original order).
//               Implemented as [B, M, K] x [B, K, N] per batch, the kernel
//               chosen by shape (GemmSmallM or sgemm: dot_general.cc);
//               operands already in (or transposed from) that layout are used
//               in place through the transpose flags, others are permuted once.
//               A non-float32 rhs in place (bf16 weights) is widened one panel
//               of output columns at a time, never whole.
//   Add, Mul    jnp.add / jnp.multiply with numpy broadcasting.
//   Relu        jax.nn.relu;  Silu  jax.nn.silu (x * sigmoid(x));  Tanh  jnp.tanh
//   Gelu        jax.nn.gelu(approximate=True) (default):
//               0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
//               approximate=False: 0.5 x (1 + erf(x / sqrt(2))).
//   RmsNorm     flax.nnx.RMSNorm over the last dim:
//               y = x / sqrt(mean(x^2) + eps) * scale,  scale: [last dim].
//   LayerNorm   flax.nnx.LayerNorm over the last dim:
//               y = (x - mean) / sqrt(var + eps) * scale + bias (biased var).
//   Softmax     jax.nn.softmax(x, axis): exp(x - max) / sum, axis may be < 0.
//   Transpose   jnp.transpose(x, perm) (any dtype; bytes moved, no conversion).
//   Reshape     jnp.reshape (one -1 allowed; metadata only, any dtype).
//   Embed       flax.nnx.Embed: out[..., :] = table[ids[...], :], for a table
//               held as a BoxTensor over [vocab, features]: ids outside the
//               box's vocab interval give zero rows, so a vocab-sharded table
//               produces partial sums that add up to the full lookup.
//               Output shape ids.shape + [table.box[1].size()].
//
// Thread-safety: pure functions. DotGeneral uses OpenBLAS's threads (see
// blas.h SetBlasThreads); the others run on the calling thread.
#ifndef MESHSERVE_COMMON_TENSOR_KERNELS_H_
#define MESHSERVE_COMMON_TENSOR_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// True for the dtypes kernels accept as float inputs/outputs:
// float32, bfloat16, float16, float64.
bool IsFloatDType(DType dtype);

// \error kInvalidArgument: non-float operand or out_dtype; dims out of range
//   or repeated; contracting/batch lists of different lengths; contracting or
//   batch dim sizes that differ between lhs and rhs.
absl::StatusOr<Tensor> DotGeneral(const Tensor& lhs, const Tensor& rhs,
                                  absl::Span<const int64_t> lhs_contracting,
                                  absl::Span<const int64_t> rhs_contracting,
                                  absl::Span<const int64_t> lhs_batch,
                                  absl::Span<const int64_t> rhs_batch,
                                  DType out_dtype);

// x[..., K] . w[K, N] (+ bias[N] when bias != nullptr): nnx.Linear.
absl::StatusOr<Tensor> Linear(const Tensor& x, const Tensor& kernel, const Tensor* bias,
                              DType out_dtype);

// Elementwise with numpy broadcasting.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b, DType out_dtype);
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b, DType out_dtype);
// The broadcast result shape of a and b (numpy rules).
// \error kInvalidArgument naming both shapes when they do not broadcast.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                     absl::Span<const int64_t> b);

// Unary elementwise (see file comment).
absl::StatusOr<Tensor> Relu(const Tensor& x, DType out_dtype);
absl::StatusOr<Tensor> Gelu(const Tensor& x, DType out_dtype, bool approximate = true);
absl::StatusOr<Tensor> Silu(const Tensor& x, DType out_dtype);
absl::StatusOr<Tensor> Tanh(const Tensor& x, DType out_dtype);

// Normalisations over the last dim. scale (and bias) have shape [x.shape[-1]].
// \error kInvalidArgument for rank-0 x, a scale/bias shape mismatch or eps < 0.
absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Tensor& scale, double eps,
                               DType out_dtype);
absl::StatusOr<Tensor> LayerNorm(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                 double eps, DType out_dtype);

// \error kInvalidArgument for axis outside [-rank, rank).
absl::StatusOr<Tensor> Softmax(const Tensor& x, int64_t axis, DType out_dtype);

// out.shape[i] = x.shape[perm[i]]. Any dtype.
// \error kInvalidArgument when perm is not a permutation of [0, rank).
absl::StatusOr<Tensor> Transpose(const Tensor& x, absl::Span<const int64_t> perm);

// Metadata only (the rvalue form moves the buffer, the const& form copies).
// \error kInvalidArgument: more than one -1, other negative dims, or an
//   element count that differs from x's.
absl::StatusOr<Tensor> Reshape(Tensor&& x, absl::Span<const int64_t> shape);
absl::StatusOr<Tensor> Reshape(const Tensor& x, absl::Span<const int64_t> shape);
// The shape Reshape would give (resolves -1).
absl::StatusOr<std::vector<int64_t>> ResolveReshape(absl::Span<const int64_t> from,
                                                    absl::Span<const int64_t> to);

// See file comment. ids: int32 or int64 (any shape); table: rank 2, float.
// \error kInvalidArgument for non-integer ids or a table that is not rank 2.
absl::StatusOr<Tensor> Embed(const Tensor& ids, const BoxTensor& table, DType out_dtype);

// Attention helpers (attention.cc). Offsets are the global index of the local
// tensor's first element along a dim (a shard's box begin), so a shard computes
// the same numbers as the whole array.
//
// A generation step's positions (common/program/decode_step.h): the
// position of global index g along the sequence dim is table[g] instead of g.
// Empty: g.
using PositionTable = absl::Span<const int64_t>;

// Positions: int32 `shape` whose element is axis_offset + its index along
//   `axis` (lax.broadcasted_iota), or table[that] with a table.
// \error kInvalidArgument: axis out of range, an index past the table.
absl::StatusOr<Tensor> Positions(absl::Span<const int64_t> shape, int64_t axis,
                                 int64_t axis_offset, PositionTable table = {});

// Rope (Llama / HF rotate_half) over the last dim d (even) with position
// pos = seq_offset + the index along seq_axis: for i < d/2, a = pos *
// theta^(-2i/d), out[i] = x[i] cos a - x[i + d/2] sin a,
// out[i + d/2] = x[i + d/2] cos a + x[i] sin a.
// With a table, pos = table[seq_offset + the index].
// \error kInvalidArgument: rank < 2, odd last dim, seq_axis out of range or
//   the last dim, theta <= 0, an index past the table.
absl::StatusOr<Tensor> Rope(const Tensor& x, int64_t seq_axis, int64_t seq_offset, double theta,
                            DType out_dtype, PositionTable table = {});

struct SoftmaxOptions {
  float scale = 1.0f;    // multiplies x first (in float32)
  bool causal = false;   // mask k > q: k along the last dim, q the one before
  int64_t q_offset = 0;  // global index of the local first q
  int64_t k_offset = 0;  // global index of the local first k
};
// jax.nn.softmax(x * scale, axis, where=mask) with mask = where != 0 (numpy
// broadcast to x; nullptr: all true) and the causal mask. Masked entries are
// 0; a row with every entry masked is all 0.
// \error kInvalidArgument: axis out of range, a where that does not broadcast
//   to x, causal with rank < 2.
absl::StatusOr<Tensor> MaskedSoftmax(const Tensor& x, int64_t axis, const SoftmaxOptions& options,
                                     const Tensor* where, DType out_dtype);

// *acc += x elementwise (same shape; acc float32/bfloat16/float16/float64 or
// int32/int64 with x of the same dtype), summing in float32 for floats.
// \error kInvalidArgument on a shape or dtype mismatch.
absl::Status AccumulateInto(Tensor* acc, const Tensor& x);

// Elementwise sum of `terms` (at least one, all the same shape) in out_dtype.
absl::StatusOr<Tensor> Sum(absl::Span<const Tensor* const> terms, DType out_dtype);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_KERNELS_H_
