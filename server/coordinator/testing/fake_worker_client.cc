#include "server/coordinator/testing/fake_worker_client.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/shard_layout.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"

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
  std::map<int64_t, std::string> text;
  for (const auto& [worker, devices] : placement.DevicesByWorker()) {
    text[worker] = absl::StrCat("model ", model.name, " ", placement.generation, " ",
                                request.program_id, "\n");
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
        absl::StrAppend(&text[worker], "output ", out, " ", source, " ", in->name, " ",
                        piece.ToString(), "\n");
      }
    }
  }
  plan.serialized_programs = std::move(text);
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

absl::Status FakeWorkerClient::CheckUp() const {
  if (down_) return Unavailable("fake worker ", worker_id_, " is down");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FakeWorkerClient::LoadModel(const LoadModelIr& call,
                                                    absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  auto failure = load_failures_.find(call.model);
  if (failure != load_failures_.end()) return failure->second;
  for (int64_t d : call.devices) {
    if (d < 0 || d >= static_cast<int64_t>(call.device_workers.size()) ||
        call.device_workers[d] != worker_id_) {
      return InvalidArgument("fake worker ", worker_id_, ": device ", d, " is not mine");
    }
  }
  loaded_[{call.model, call.generation}] = call.devices;
  return 0;
}

absl::Status FakeWorkerClient::UnloadModel(const std::string& model, int64_t generation,
                                           absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  loaded_.erase({model, generation});
  unloaded_.push_back({model, generation});
  return absl::OkStatus();
}

absl::Status FakeWorkerClient::InstallProgram(const std::string& program, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  ++install_calls_;
  std::istringstream lines(program);
  std::string model;
  int64_t generation = -1;
  std::string word, program_id;
  lines >> word >> model >> generation >> program_id;
  if (word != "model" || !loaded_.count({model, generation})) {
    return FailedPrecondition("fake worker ", worker_id_, ": model '", model,
                              "' generation ", generation, " not loaded");
  }
  programs_[program_id] = program;
  return absl::OkStatus();
}

absl::StatusOr<ExecuteResult> FakeWorkerClient::Execute(ExecuteCall call,
                                                        absl::Duration) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    MS_RETURN_IF_ERROR(CheckUp());
    ++execute_calls_;
    if (!execute_failure_.ok()) {
      absl::Status failure = execute_failure_;
      if (execute_failures_left_ > 0 && --execute_failures_left_ == 0) {
        execute_failure_ = absl::OkStatus();
      }
      return failure;
    }
    delay = execute_delay_;
    max_running_ = std::max(max_running_, ++running_);
  }
  absl::SleepFor(delay);
  absl::MutexLock lock(&mu_);
  --running_;
  MS_RETURN_IF_ERROR(CheckUp());
  std::map<std::pair<int64_t, std::string>, BoxTensor> inputs;
  for (const SliceIr& s : call.inputs) {
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(s.box));
    MS_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(s.dtype));
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(dtype, box.shape(), s.data));
    inputs[{s.device, s.name}] = BoxTensor{box, std::move(t)};
  }
  ExecuteResult result;
  auto program = programs_.find(call.program_id);
  if (program == programs_.end()) {
    return FailedPrecondition("fake worker ", worker_id_, ": unknown program '",
                              call.program_id, "'");
  }
  {
    const std::string& text = program->second;
    std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    for (size_t i = 1; i < lines.size(); ++i) {
      std::vector<std::string> f = absl::StrSplit(lines[i], absl::MaxSplits(' ', 4));
      int64_t device = 0;
      if (f.size() != 5 || !absl::SimpleAtoi(f[2], &device)) continue;
      auto in = inputs.find({device, f[3]});
      if (in == inputs.end()) continue;
      MS_ASSIGN_OR_RETURN(Box box, ParseBox(f[4]));
      SliceIr out;
      out.name = f[1];
      out.device = device;
      out.box = BoxToIr(box);
      out.dtype = DTypeToProto(in->second.tensor.dtype());
      MS_ASSIGN_OR_RETURN(out.data, ExtractBox(in->second, box));
      result.outputs.push_back(std::move(out));
    }
  }
  return result;
}

absl::Status FakeWorkerClient::Cancel(const std::string& request_id, const std::string&,
                                      absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  cancelled_.push_back(request_id);
  return absl::OkStatus();
}

absl::StatusOr<WorkerStatusIr> FakeWorkerClient::Status(absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  WorkerStatusIr result;
  result.worker_id = worker_id_;
  result.blas_core = "Fake";
  for (const auto& [key, devices] : loaded_) {
    result.models.push_back({key.first, key.second, devices, 0});
  }
  return result;
}

void FakeWorkerClient::SetDown(bool down) {
  absl::MutexLock lock(&mu_);
  down_ = down;
}
void FakeWorkerClient::FailExecute(absl::Status status, int times) {
  absl::MutexLock lock(&mu_);
  execute_failure_ = times == 0 ? absl::OkStatus() : std::move(status);
  execute_failures_left_ = times;
}
void FakeWorkerClient::FailLoad(const std::string& model, absl::Status status) {
  absl::MutexLock lock(&mu_);
  load_failures_[model] = std::move(status);
}
void FakeWorkerClient::SetExecuteDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  execute_delay_ = delay;
}
int FakeWorkerClient::execute_calls() const {
  absl::MutexLock lock(&mu_);
  return execute_calls_;
}
int FakeWorkerClient::install_calls() const {
  absl::MutexLock lock(&mu_);
  return install_calls_;
}
std::vector<std::string> FakeWorkerClient::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}
std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> FakeWorkerClient::loaded()
    const {
  absl::MutexLock lock(&mu_);
  return loaded_;
}
std::vector<std::pair<std::string, int64_t>> FakeWorkerClient::unloaded() const {
  absl::MutexLock lock(&mu_);
  return unloaded_;
}
int64_t FakeWorkerClient::max_concurrent_executes() const {
  absl::MutexLock lock(&mu_);
  return max_running_;
}

WorkerClientFactory FakeCluster::Factory() {
  return [this](int64_t id, const std::string&)
             -> absl::StatusOr<std::shared_ptr<WorkerClient>> { return Worker(id); };
}

std::shared_ptr<FakeWorkerClient> FakeCluster::Worker(int64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto& w = workers_[worker_id];
  if (w == nullptr) w = std::make_shared<FakeWorkerClient>(worker_id);
  return w;
}

}  // namespace meshserve
