#include "server/coordinator/testing/fake_model_compiler.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/shard_layout.h"

namespace meshserve {
namespace {

// The model input an output is the identity of.
absl::StatusOr<const InputDef*> TraceToInput(const ModelFile& model, std::string name) {
  for (int hops = 0; hops < 1000; ++hops) {
    if (const InputDef* in = model.FindInput(name)) return in;
    const LayerDef* layer = model.FindLayer(name);
    if (layer == nullptr || layer->inputs.empty()) {
      return Unimplemented("fake builder: '", name, "' does not lead to an input");
    }
    name = layer->inputs.front();
  }
  return Unimplemented("fake builder: cycle at '", name, "'");
}

}  // namespace

absl::Status FakeModelCompiler::ValidateModel(const ModelFile& model) {
  if (reject_.count(model.name)) {
    return InvalidArgument("model '", model.name, "': rejected by the fake rules");
  }
  return absl::OkStatus();
}

int FakeModelCompiler::compiles() const {
  absl::MutexLock lock(&mu_);
  return compiles_;
}

absl::StatusOr<CompiledPlan> FakeModelCompiler::Compile(const CompileRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    ++compiles_;
  }
  const ModelFile& model = *request.model;
  const DeviceAssignment& placement = request.devices;
  const int64_t num_devices = placement.mesh.num_devices();
  CompiledPlan plan;
  plan.program_id = request.program_id;
  plan.generation = placement.generation;
  plan.kept_param_bytes = kept_param_bytes_.load();
  for (const auto& [worker, devices] : placement.DevicesByWorker()) {
    ProgramIr& program = plan.programs[worker];
    program.program_id = request.program_id;
    program.model = model.name;
    program.generation = placement.generation;
    program.worker = worker;
  }
  std::map<std::string, std::vector<Box>> input_boxes;  // per device
  for (const InputDef& in : model.inputs) {
    const std::vector<int64_t>& shape = request.input_shapes.at(in.name);
    MS_ASSIGN_OR_RETURN(NamedSharding sharding,
                        NamedSharding::Create(placement.mesh, in.sharding,
                                              static_cast<int>(shape.size())),
                        "input '", in.name, "'");
    MS_RETURN_IF_ERROR(CheckDivisible(shape, sharding), "input '", in.name, "'");
    input_boxes[in.name] = ShardBoxesByDevice(shape, sharding);
    for (int64_t d = 0; d < num_devices; ++d) {
      plan.input_slices.push_back(
          {in.name, placement.device_workers[d], d, input_boxes[in.name][d]});
    }
  }
  for (const std::string& out : model.outputs) {
    MS_ASSIGN_OR_RETURN(const InputDef* in, TraceToInput(model, out));
    const std::vector<int64_t>& shape = request.input_shapes.at(in->name);
    auto override_it = request.out_shardings.find(out);
    PartitionSpec spec =
        override_it != request.out_shardings.end() ? override_it->second : in->sharding;
    MS_ASSIGN_OR_RETURN(ArrayType type,
                        MakeArrayType(in->dtype, shape, placement.mesh, spec),
                        "output '", out, "'");
    plan.outputs.push_back({out, in->dtype, shape, type.ToString(), spec});
    // Each output box, cut along the input's shards (one replica each).
    MS_ASSIGN_OR_RETURN(NamedSharding in_sharding,
                        NamedSharding::Create(placement.mesh, in->sharding,
                                              static_cast<int>(shape.size())));
    for (const std::vector<int64_t>& group : ReplicaGroups(type.sharding)) {
      const Box box = ShardBoxForDevice(shape, type.sharding, group.front());
      for (const std::vector<int64_t>& in_group : ReplicaGroups(in_sharding)) {
        const int64_t source = in_group.front();
        const Box piece = Intersect(box, input_boxes[in->name][source]);
        if (piece.IsEmpty()) continue;
        const int64_t worker = placement.device_workers[source];
        plan.output_pieces.push_back({out, worker, source, piece});
        plan.programs[worker].steps.push_back(
            OutputStepIr{InputBuffer(in->name), BoxToIr(piece), out, source});
      }
    }
  }
  return plan;
}

absl::StatusOr<DescribeResult> FakeModelCompiler::Describe(const ModelFile& model,
                                                            const DeviceAssignment& placement,
                                                            const InputShapes& input_shapes) {
  DescribeResult result;
  result.model = model.name;
  result.mesh = placement.mesh.ToString();
  for (const InputDef& in : model.inputs) {
    auto it = input_shapes.find(in.name);
    std::vector<int64_t> shape = it != input_shapes.end() ? it->second : in.shape;
    MS_ASSIGN_OR_RETURN(ArrayType type,
                        MakeArrayType(in.dtype, shape, placement.mesh, in.sharding),
                        "input '", in.name, "'");
    result.values.push_back({in.name, "input", type.ToString(), "", ""});
  }
  result.text = absl::StrCat(model.name, " on ", result.mesh);
  return result;
}

void FakeModelCompiler::set_kept_param_bytes(int64_t bytes) { kept_param_bytes_ = bytes; }

}  // namespace meshserve
