// `meshserve import`: a Hugging Face causal language model directory
// (config.json + model.safetensors or a sharded model.safetensors.index.json)
// as a meshserve model file whose params point into the original safetensors
// (docs/import.md). Nothing is copied: each worker reads only its shards'
// bytes from the checkpoint.
//
// Supported: GPT2LMHeadModel and LlamaForCausalLM (hf_import_config.h). The
// model file has one required input `input_ids` (int32 [-1, -1]: batch,
// sequence) and the output `logits` (float32 [batch, sequence, vocab]);
// layers and param names: hf_import_gpt2.cc, hf_import_llama.cc; shardings:
// hf_import_graph.h. The file's `checkpoint` is the path of the directory's
// model.safetensors (or index) relative to `out_dir`.
//
// Errors: config.json and checkpoint errors as hf_import_config.h and
// hf_import_checkpoint.h say; a missing tensor kNotFound, a wrong shape or
// dtype kInvalidArgument, each naming the tensor; kUnavailable naming the
// path when the model file cannot be written; and, should the written file
// not parse or type (a bug), the model file's error.
//
// Thread-safety: functions over values; they touch only the given paths.
#ifndef MESHSERVE_CLIENT_HF_IMPORT_H_
#define MESHSERVE_CLIENT_HF_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/hf_import_config.h"
#include "client/hf_import_graph.h"

namespace meshserve {
namespace client {

struct ImportOptions {
  std::string hf_dir;
  std::string out_dir;
  std::string name;                       // "": the basename of hf_dir
  MeshAxes mesh = {{"model", -1}};
  // No checkpoint: config.json alone, every param initialised from the seed
  // (GPT-2's / Llama's initializer_range normals, norms ones, biases zeros).
  bool init_from_seed = false;
};

struct ImportResult {
  std::string model_path;   // out_dir/NAME.json
  std::string name;
  LmConfig config;
  LmShardPlan plan;
  std::string checkpoint;   // as written in the file ("" with init_from_seed)
  int64_t num_params = 0;   // elements
  std::vector<std::string> unused_tensors;  // in the checkpoint, read by no param
};

// Reads hf_dir, writes out_dir/NAME.json (out_dir is created), validates it
// with the model file's own parser and typing.
absl::StatusOr<ImportResult> ImportHfModel(const ImportOptions& options);

// The model file's JSON text for `config` and the checkpoint (null: params
// initialised), without touching the disk; `checkpoint_path` is written as
// the file's `checkpoint`.
absl::StatusOr<std::string> LmModelFileText(const std::string& name, const LmConfig& config,
                                            const MeshAxes& mesh,
                                            const HfCheckpoint* checkpoint,
                                            const std::string& checkpoint_path,
                                            std::vector<std::string>* unused_tensors);

// The describe summary of an imported model as the coordinator would place
// it on `num_workers` workers (offline: typing and compiling only): every
// input, param and output with its type, the params' grids, each layer's
// collectives (JaxModelCompiler::Describe + FormatDescribe), then the param
// bytes in total and on the fullest device.
absl::StatusOr<std::string> DescribeImported(const ImportResult& result, int64_t num_workers);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_HF_IMPORT_H_
