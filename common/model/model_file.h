// The model file users write (../shared/design/model-format.md): parsing and
// validation. Typing every layer with the sharding rules is in typed_model.h.
//
// ParseModelFile checks the file's structure: required fields, known ops,
// names that exist (layers refer to inputs, params or earlier layers), specs
// that parse, shapes >= 1 (inputs may use -1), at most one -1 mesh axis,
// known init kinds, the op fields of docs/model-format.md (softmax scale /
// causal / where, positions axis, rope theta / seq_axis, reshape's 0 and -1,
// einsum bias), a param's from / from_offset (rank, >= 0; `from` needs a
// checkpoint), checkpoint_tied / checkpoint_ignored (names that are no param
// and no `from`; a tied name's twin is one). The layer part is model_file_layers.cc. Every error is kInvalidArgument and names the model, the
// field and the offending value ("model 'swiglu': layer 'y': unknown op 'lineer'").
//
// Thread-safety: plain values.
#ifndef MESHSERVE_COMMON_MODEL_MODEL_FILE_H_
#define MESHSERVE_COMMON_MODEL_MODEL_FILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/model/batching_config.h"
#include "common/model/model_op.h"
#include "common/sharding/mesh.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

enum class InitKind { kZeros, kOnes, kNormal, kLecunNormal, kXavierUniform, kUniform };

struct ParamDef {
  std::string name;
  std::vector<int64_t> shape;
  PartitionSpec sharding;
  DType dtype = DType::kFloat32;  // the param's own, else the model's
  InitKind init = InitKind::kZeros;
  double stddev = 1.0;  // kNormal
  double scale = 1.0;   // kUniform: U[0, scale), as jax.nn.initializers.uniform
  // The checkpoint tensor the param is the box [from_offset, from_offset +
  // shape) of: `from` (default: the param's own name; has_from when the file
  // names one, and then the tensor must exist) at `from_offset` (default
  // zeros, same rank as shape).
  std::string from;
  bool has_from = false;
  std::vector<int64_t> from_offset;
  // "sharding": "auto": the layout search (server/suggest) chooses it;
  // `sharding` is then P() until resolved.
  bool auto_sharding = false;
};

struct InputDef {
  std::string name;
  std::vector<int64_t> shape;  // -1: set by each request
  PartitionSpec sharding;
  DType dtype = DType::kFloat32;  // int32 or int64 for embed ids
};

struct LayerDef {
  std::string name;
  ModelOp kind = ModelOp::kLinear;  // the op (model_op.h); its name is ModelOpName(kind)
  std::vector<std::string> inputs;  // "input" or "inputs", in order
  std::string kernel, bias, scale, table;  // param names where the op has them
  std::string equation;                    // einsum
  int64_t axis = -1;                       // softmax, positions
  std::vector<int64_t> perm;               // transpose
  std::vector<int64_t> shape;              // reshape (one -1; 0 copies the input's dim)
  double epsilon = 1e-6;                   // rms_norm, layer_norm
  double softmax_scale = 1.0;              // softmax "scale": multiplies the input first
  double attention_scale = 0;              // attention "scale" (0: 1 / sqrt(head_dim))
  int64_t rows = 0;                        // select_rows: the rows kept (>= 1)
  int64_t vocab_size = 0;                  // sample: the real vocabulary (<= the last dim)
  bool causal = false;                     // softmax: mask k > q over the last two dims
  std::string where;                       // softmax: an input or layer, nonzero keeps
  double theta = 10000.0;                  // rope
  int64_t seq_axis = 1;                    // rope: the dim whose index is the position
  std::optional<PartitionSpec> out_sharding;  // may carry unreduced axes
  bool auto_axes = false;
};

struct ModelFile {
  std::string name;
  std::vector<std::pair<std::string, int64_t>> mesh_axes;  // in order; one may be -1
  DType dtype = DType::kFloat32;
  int64_t seed = 0;
  // "checkpoint": the resolved paths (absolute or relative to model_dir), in
  // order: one .safetensors file, one model.safetensors.index.json, or a list
  // of .safetensors files. `checkpoint` is the first ("" if none).
  std::vector<std::string> checkpoints;
  std::string checkpoint;
  std::string model_dir;
  std::vector<InputDef> inputs;
  std::vector<ParamDef> params;
  std::vector<LayerDef> layers;
  std::vector<std::string> outputs;
  std::string json_text;  // the file as read (sent verbatim to workers)
  std::optional<BatchingConfig> batching;  // batching_config.h; none: unbatched
  // "generation": {"context_length": N, "eos_token_ids": [..]} (the
  // checkpoint's config.json / generation_config.json, written by the
  // importer). 0 / empty when absent.
  int64_t context_length = 0;
  std::vector<int64_t> eos_token_ids;
  // Checkpoint names the params do not read (written by `meshserve import`),
  // so a whole checkpoint or state_dict can be pushed and pulled by name:
  // "checkpoint_tied": name -> the param or checkpoint tensor (some param's
  // `from`) it must equal, e.g. GPT-2's "lm_head.weight" -> "wte.weight";
  // "checkpoint_ignored": tensors the model does not read (buffers such as
  // GPT-2's "h.0.attn.bias"). A name in either is neither a param nor a
  // `from`, and is in at most one of them.
  std::map<std::string, std::string> checkpoint_tied;
  std::vector<std::string> checkpoint_ignored;

  const ParamDef* FindParam(absl::string_view name) const;
  const InputDef* FindInput(absl::string_view name) const;
  const LayerDef* FindLayer(absl::string_view name) const;
};

// Parses and validates (see file comment). A param's "sharding": "auto" (the
// layout search chooses it, docs/suggest.md) is accepted only with
// `allow_auto_sharding` (suggest and import --auto_shard read such files);
// otherwise kInvalidArgument naming the param: a file is served resolved.
// Any other string is read as a spec ("P('fsdp', None)"); one that is not
// is kInvalidArgument naming the param and the value.
absl::StatusOr<ModelFile> ParseModelFile(absl::string_view json_text,
                                         absl::string_view model_dir,
                                         bool allow_auto_sharding = false);
// Reads `path` and parses it with model_dir = its folder.
// \error kNotFound if the file cannot be read; parse errors as above.
absl::StatusOr<ModelFile> LoadModelFile(absl::string_view path,
                                        bool allow_auto_sharding = false);

// The model's mesh for `num_devices_available` devices: a -1 axis takes
// num_devices_available / (product of the others), at least 1. All axes are
// Explicit.
// \error kInvalidArgument when the product of the fixed axes does not divide
//   num_devices_available (only when an axis is -1).
absl::StatusOr<Mesh> ResolveMesh(const ModelFile& model,
                                 int64_t num_devices_available);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_MODEL_MODEL_FILE_H_
