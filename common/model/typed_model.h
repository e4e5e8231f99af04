// Typing a model: the ArrayType (JAX's jax.typeof) of every input, param and
// layer result, computed with JAX's explicit-sharding rules
// (common/sharding/rules/).
//
// Per layer op (model-format.md), the rule used:
//   linear       LinearRule (dot_general + bias broadcast), out_sharding passed
//   einsum       EinsumRule (operands may be results, inputs or params), then
//                AddBiasRule for an optional bias
//   embed        EmbedRule
//   rms_norm, layer_norm  NormRule;  relu/gelu/silu/tanh  ActivationRule
//   softmax      MaskedSoftmaxRule (axis checked against the rank; where, causal)
//   positions    PositionsRule (int32, the input's sharding);  rope  RopeRule
//   add, mul     ElementwiseRule (numpy broadcasting)
//   reshape      ReshapeRule (0s and one -1 resolved first), out_sharding passed
//   transpose    TransposeRule;  reshard  ReshardRule
// `auto_axes: true` runs the op under AutoAxesRule (every mesh axis Auto in
// the body, result = out_sharding). For the ops whose JAX function takes no
// out_sharding (norms, activations, softmax, add, mul, transpose) a layer's
// out_sharding is applied as a jax.sharding.reshard of the rule's result.
//
// Per-request out_sharding overrides replace the out_sharding of the layer
// that produces the named output (as a call-time out_sharding in Flax).
//
// Errors: kInvalidArgument with JAX's message prefixed by the layer, e.g.
//   "layer 'y': Contracting dimensions are sharded and it is ambiguous how the
//   output should be sharded. ...";
// input shapes that do not match the file ("input 'x': request shape [2,3]
// does not match [-1,-1,2048]"), missing inputs, overrides naming a value that
// is not an output.
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_COMMON_MODEL_TYPED_MODEL_H_
#define MESHSERVE_COMMON_MODEL_TYPED_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/model_file.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

struct TypedModel {
  ModelFile model;
  Mesh mesh;
  // Every input, param and layer result by name.
  std::map<std::string, ArrayType> types;
  // The out_sharding each layer was typed with (file value or override).
  std::map<std::string, std::optional<PartitionSpec>> layer_out_shardings;

  // Precondition: `name` was typed (DCHECK); use Find on untrusted names.
  const ArrayType& TypeOf(absl::string_view name) const;
  const ArrayType* Find(absl::string_view name) const;
  // "x: float32[8@fsdp,16,32]" lines, inputs, params then layers.
  std::string ToString() const;
};

// `input_shapes`: every input's full shape (the file's -1s filled).
// `out_shardings`: per output name, the out_sharding of the layer producing it.
absl::StatusOr<TypedModel> TypeModel(
    const ModelFile& model, const Mesh& mesh,
    const std::map<std::string, std::vector<int64_t>>& input_shapes,
    const std::map<std::string, PartitionSpec>& out_shardings = {});

// The nominal size ValidateModel gives every request-set (-1) input dim: the
// product of the mesh's axis sizes (a -1 axis counted as 1), so any sharding
// of the dim divides it.
int64_t NominalDimSize(const ModelFile& model);

// Types the model on `mesh` with every request-set (-1) input dim set to the
// mesh's device count, which every sharding of the dim divides: whether the
// parameters and layers shard evenly on that mesh. Errors are TypeModel's.
absl::Status CheckModelTypesOn(const ModelFile& model, const Mesh& mesh);

// Load-time check: types the model on its own mesh (a -1 axis as 1) with
// every -1 input dim set to NominalDimSize. Errors are TypeModel's prefixed
// with "model '<name>'".
absl::Status ValidateModel(const ModelFile& model);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_MODEL_TYPED_MODEL_H_
