// What the coordinator runtime needs from the model compiler, as an interface,
// so the runtime (server/coordinator, ms_coordinator) depends only on this
// header and can be tested with a fake compiler and fake workers.
//
// The production implementation (jax_model_compiler.h) wraps
// common/model/typed_model.h (TypeModel/ValidateModel) and
// server/compiler/compiler.h. A CompiledPlan (compiled_plan.h) is everything a
// request needs: each worker's program (ProgramIr), which box of each input
// each (worker, device) receives, and which (worker, device) returns which box
// of each output (one replica per box: the pieces of one output tile it
// exactly once).
//
// Thread-safety: implementations must allow concurrent calls.
#ifndef MESHSERVE_SERVER_COMPILER_MODEL_COMPILER_H_
#define MESHSERVE_SERVER_COMPILER_MODEL_COMPILER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/mesh.h"
#include "server/compiler/compiled_plan.h"

namespace meshserve {

using InputShapes = std::map<std::string, std::vector<int64_t>>;
using OutShardings = std::map<std::string, PartitionSpec>;

// The compiler's view of a placement (server/coordinator/placement.h): the
// model's mesh and which worker hosts each of its devices.
struct DeviceAssignment {
  Mesh mesh;
  std::vector<int64_t> device_workers;  // worker id per device
  int64_t generation = 0;

  // worker id -> its devices, ascending.
  std::map<int64_t, std::vector<int64_t>> DevicesByWorker() const {
    std::map<int64_t, std::vector<int64_t>> out;
    for (int64_t d = 0; d < static_cast<int64_t>(device_workers.size()); ++d) {
      out[device_workers[d]].push_back(d);
    }
    return out;
  }
};

struct CompileRequest {
  const ModelFile* model = nullptr;
  DeviceAssignment devices;
  InputShapes input_shapes;    // every input, -1s filled
  OutShardings out_shardings;  // per-output overrides
  std::string program_id;
};

struct DescribeValue {
  std::string name;
  std::string kind;  // "input", "param", "activation", "output"
  std::string type_str;
  std::string visualization;
  std::string layer_op;
};

struct DescribeCollective {
  std::string layer;
  std::string pattern;
  std::string value;
  int64_t bytes = 0;
};

struct DescribeResult {
  std::string model;
  std::string mesh;
  std::vector<DescribeValue> values;
  std::vector<DescribeCollective> collectives;
  std::string text;
};

class ModelCompiler {
 public:
  virtual ~ModelCompiler() = default;
  // Load-time check: would JAX accept this model? (Types it on its own mesh.)
  virtual absl::Status ValidateModel(const ModelFile& model) = 0;
  // \error kInvalidArgument for shapes or out_shardings JAX would reject.
  virtual absl::StatusOr<CompiledPlan> Compile(const CompileRequest& request) = 0;
  virtual absl::StatusOr<DescribeResult> Describe(const ModelFile& model,
                                                  const DeviceAssignment& devices,
                                                  const InputShapes& input_shapes) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_MODEL_COMPILER_H_
