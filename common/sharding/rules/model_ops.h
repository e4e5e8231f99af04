// Rules for the model-level ops the compiler emits, built from the primitive
// rules the way Flax NNX builds the layers (flax/nnx/nn/linear.py,
// normalization.py, jax/_src/nn/functions.py).
//
// linear (nnx.Linear): dot_general contracting the input's last dim with the
//   kernel's first (out_sharding passed through), then `+ bias` with the
//   broadcasting rule (op name "add"; the bias [out] is lifted to the rank).
//     x f32[2@X,2] . W f32[2,4] -> f32[2@X,4]; out_sharding=P('X','Y') -> f32[2@X,4@Y]
// rms_norm / layer_norm: the result keeps the input's type; the scale (and
//   bias) [D] are checked against the last dim with the broadcasting rule
//   (op name "mul" / "add"), e.g. x [..,D@model] with scale P('data') errors.
// softmax, activations (silu, gelu, relu, ...): unary, keep the input's type
//   (softmax reduces over a dim, but jax.nn.softmax's result keeps the operand
//   sharding: the reductions' results are broadcast back).
// positions, rope, masked softmax, bias: see their functions.
// embed (nnx.Embed.__call__: jnp.take(embedding, indices, axis=0)):
//   * with out_sharding: nnx wraps the take in auto_axes(out_sharding=...), so
//     the result is exactly out_sharding (AutoAxesRule);
//   * without it: OUR READING of JAX's gather rule (jax/_src/lax/slicing.py
//     _gather_sharding_rule) for this gather: if the vocabulary dim of the
//     embedding is unsharded, the result [*indices.shape, D] takes the indices'
//     entries followed by the embedding's feature entry (then the usual
//     duplicate-axis check); a sharded vocabulary dim is an error asking for
//     an explicit out_sharding (JAX: "Use `.at[...].get(out_sharding=)` to
//     provide output PartitionSpec for the gather indexing").
// embed_attend (nnx.Embed.attend): jnp.dot(query, embedding.T, out_sharding=).
#ifndef MESHSERVE_COMMON_SHARDING_RULES_MODEL_OPS_H_
#define MESHSERVE_COMMON_SHARDING_RULES_MODEL_OPS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// \error kInvalidArgument: kernel not rank 2, shape mismatches, dot_general or
//   broadcasting errors.
absl::StatusOr<ArrayType> LinearRule(const ArrayType& input, const ArrayType& kernel,
                                     const std::optional<ArrayType>& bias,
                                     const std::optional<PartitionSpec>& out_sharding);

// `op_name` is "rms_norm" or "layer_norm" (used in messages).
// \error kInvalidArgument: scale/bias not [last dim], broadcasting errors.
absl::StatusOr<ArrayType> NormRule(absl::string_view op_name, const ArrayType& input,
                                   const std::optional<ArrayType>& scale,
                                   const std::optional<ArrayType>& bias);

absl::StatusOr<ArrayType> SoftmaxRule(const ArrayType& input);

// jax.nn.softmax(x, where=mask) with an optional causal mask over the last two
// dims (jax.nn.dot_product_attention's is_causal): the result keeps x's type;
// `where` must broadcast to x's shape (jnp.where's broadcasting rule, op name
// "softmax where"); causal needs rank >= 2.
// \error kInvalidArgument: a mask that does not broadcast to x, incompatible
//   shardings, causal on rank < 2.
absl::StatusOr<ArrayType> MaskedSoftmaxRule(const ArrayType& input,
                                            const std::optional<ArrayType>& where,
                                            bool causal);

// positions (lax.broadcasted_iota(int32, x.shape, axis)): int32 with the
// input's shape and sharding (unreduced axes dropped). Axis < 0 counts from
// the end. \error kInvalidArgument for an axis outside [-rank, rank).
absl::StatusOr<ArrayType> PositionsRule(const ArrayType& input, int64_t axis);

// rope (rotary embeddings, rotate_half convention) over the last dim d with
// positions along seq_axis: the input's type. The last dim must be even and
// unsharded (each element pairs with the one d/2 away); seq_axis != last.
// \error kInvalidArgument naming the value for each violated condition.
absl::StatusOr<ArrayType> RopeRule(const ArrayType& input, int64_t seq_axis);

// einsum's optional bias (HF Linear biases): result + bias, bias [result's
// last dim], with the broadcasting rule (op name "add").
absl::StatusOr<ArrayType> AddBiasRule(absl::string_view op_name, const ArrayType& result,
                                      const ArrayType& bias);
absl::StatusOr<ArrayType> ActivationRule(absl::string_view op_name, const ArrayType& input);

// \error kInvalidArgument: embedding not rank 2, integer indices expected,
//   a sharded vocabulary dim without out_sharding, duplicate axes.
absl::StatusOr<ArrayType> EmbedRule(const ArrayType& indices, const ArrayType& embedding,
                                    const std::optional<PartitionSpec>& out_sharding);

// query [..., D] . embedding[V, D]^T -> [..., V].
absl::StatusOr<ArrayType> EmbedAttendRule(const ArrayType& query, const ArrayType& embedding,
                                          const std::optional<PartitionSpec>& out_sharding);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_MODEL_OPS_H_
