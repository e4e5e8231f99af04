// Coordinator: request validation, the compiled-program cache, and running a
// request on its workers (see coordinator.h).
#include <algorithm>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"
#include "server/coordinator/coordinator.h"

namespace meshserve {

struct Coordinator::Validated {
  std::shared_ptr<const ModelFile> model;
  InputShapes shapes;
  OutShardings out_specs;
  std::vector<std::string> outputs;  // requested, in model order
  std::map<std::string, const InferInput*> inputs;
  std::string cache_key_suffix;
};

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status ValidateInput(const ModelFile& model, const InputDef& def,
                           const InferInput& in) {
  const std::string where = absl::StrCat("model '", model.name, "' input '", in.name, "'");
  if (in.dtype != def.dtype) {
    return InvalidArgument(where, ": dtype ", DTypeName(in.dtype), ", expected ",
                           DTypeName(def.dtype));
  }
  if (in.shape.size() != def.shape.size()) {
    return InvalidArgument(where, ": shape ", ShapeText(in.shape), " has rank ",
                           in.shape.size(), ", expected rank ", def.shape.size(), " ",
                           ShapeText(def.shape));
  }
  for (size_t i = 0; i < in.shape.size(); ++i) {
    if (in.shape[i] < 1) {
      return InvalidArgument(where, ": shape ", ShapeText(in.shape), " dim ", i, " is ",
                             in.shape[i], ", must be >= 1");
    }
    if (def.shape[i] != -1 && def.shape[i] != in.shape[i]) {
      return InvalidArgument(where, ": shape ", ShapeText(in.shape), " dim ", i, " is ",
                             in.shape[i], ", expected ", def.shape[i], " (model shape ",
                             ShapeText(def.shape), ")");
    }
  }
  int64_t bytes = DTypeSize(in.dtype);
  for (int64_t d : in.shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return InvalidArgument(where, ": shape ", ShapeText(in.shape), " overflows int64");
    }
  }
  if (static_cast<int64_t>(in.data.size()) != bytes) {
    return InvalidArgument(where, ": ", in.data.size(), " bytes of data, expected ", bytes,
                           " (shape ", ShapeText(in.shape), " ", DTypeName(in.dtype), ")");
  }
  return absl::OkStatus();
}

absl::Status ValidateOutputs(const ModelFile& model, const InferRequest& request,
                             std::vector<std::string>* outputs, OutShardings* specs) {
  const std::string known = absl::StrJoin(model.outputs, ", ");
  auto is_output = [&](const std::string& name) {
    return std::find(model.outputs.begin(), model.outputs.end(), name) != model.outputs.end();
  };
  for (const std::string& name : request.requested_outputs) {
    if (!is_output(name)) {
      return InvalidArgument("model '", model.name, "' has no output '", name,
                             "' (outputs: ", known, ")");
    }
  }
  for (const std::string& name : model.outputs) {
    const auto& req = request.requested_outputs;
    if (req.empty() || std::find(req.begin(), req.end(), name) != req.end()) {
      outputs->push_back(name);
    }
  }
  for (const auto& [name, text] : request.out_shardings) {
    if (!is_output(name)) {
      return InvalidArgument("out_sharding for unknown output '", name, "' of model '",
                             model.name, "' (outputs: ", known, ")");
    }
    absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec(text);
    if (!spec.ok()) {
      return InvalidArgument("output '", name, "': bad out_sharding '", text,
                             "': ", spec.status().message());
    }
    (*specs)[name] = *std::move(spec);
  }
  return absl::OkStatus();
}

bool IsWorkerFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

}  // namespace

absl::StatusOr<Coordinator::Validated> Coordinator::Validate(
    const InferRequest& request) const {
  Validated v;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(request.model);
    if (it == models_.end()) {
      std::vector<std::string> names;
      for (const auto& [name, entry] : models_) names.push_back(name);
      return NotFound("model '", request.model, "' not found (models: ",
                      absl::StrJoin(names, ", "), ")");
    }
    if (!it->second.error.ok()) {
      return FailedPrecondition("model '", request.model, "' cannot be served: ",
                                it->second.error.message());
    }
    v.model = it->second.model;
  }
  const ModelFile& model = *v.model;
  for (const InferInput& in : request.inputs) {
    const InputDef* def = model.FindInput(in.name);
    if (def == nullptr) {
      std::vector<std::string> names;
      for (const InputDef& d : model.inputs) names.push_back(d.name);
      return InvalidArgument("model '", model.name, "' has no input '", in.name,
                             "' (inputs: ", absl::StrJoin(names, ", "), ")");
    }
    if (!v.inputs.emplace(in.name, &in).second) {
      return InvalidArgument("input '", in.name, "' given twice");
    }
    MS_RETURN_IF_ERROR(ValidateInput(model, *def, in));
    v.shapes[in.name] = in.shape;
  }
  for (const InputDef& def : model.inputs) {
    if (!v.inputs.count(def.name)) {
      return InvalidArgument("model '", model.name, "': missing input '", def.name, "'");
    }
  }
  MS_RETURN_IF_ERROR(ValidateOutputs(model, request, &v.outputs, &v.out_specs));
  std::vector<std::string> key;
  for (const auto& [name, shape] : v.shapes) key.push_back(name + ShapeText(shape));
  for (const auto& [name, spec] : v.out_specs) key.push_back(name + "=" + spec.ToString());
  v.cache_key_suffix = absl::StrJoin(key, ";");
  return v;
}

absl::Status Coordinator::Install(const CompiledPlan& plan, const Placement& placement) {
  std::vector<std::pair<int64_t, const ProgramIr*>> parts;
  for (const auto& [worker, program] : plan.programs) parts.push_back({worker, &program});
  std::vector<absl::Status> results(parts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < parts.size(); ++i) {
    threads.emplace_back([&, i] {
      const int64_t id = parts[i].first;
      auto addr = placement.worker_addresses.find(id);
      if (addr == placement.worker_addresses.end()) {
        results[i] = Internal("program for worker ", id, " outside the placement");
        return;
      }
      absl::StatusOr<std::shared_ptr<WorkerClient>> client = Client(id, addr->second);
      results[i] = client.ok() ? (*client)->InstallProgram(*parts[i].second,
                                                           options_.install_timeout)
                               : client.status();
      results[i] = AnnotateStatus(results[i], "InstallProgram on worker ", id);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (results[i].ok()) continue;
    if (IsWorkerFailure(results[i])) registry_.MarkSuspect(parts[i].first);
    return IsWorkerFailure(results[i]) ? absl::UnavailableError(results[i].message())
                                       : results[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CompiledPlan>> Coordinator::GetOrCompile(
    const Validated& v, const std::shared_ptr<const Placement>& placement) {
  const std::string key =
      absl::StrCat(placement->model, "|", placement->generation, "|", v.cache_key_suffix);
  std::shared_ptr<CacheEntry> entry;
  {
    absl::MutexLock lock(&cache_mu_);
    std::shared_ptr<CacheEntry>& slot = cache_[key];
    if (slot == nullptr) slot = std::make_shared<CacheEntry>();
    entry = slot;
  }
  absl::MutexLock lock(&entry->mu);
  if (entry->done) return entry->plan;
  CompileRequest request;
  request.model = v.model.get();
  request.devices = placement->Devices();
  request.input_shapes = v.shapes;
  request.out_shardings = v.out_specs;
  request.program_id = absl::StrCat(placement->model, "/g", placement->generation, "/p",
                                    next_request_.fetch_add(1));
  absl::Status status;
  absl::StatusOr<CompiledPlan> plan = compiler_->Compile(request);
  if (plan.ok()) {
    plan->generation = placement->generation;
    status = Install(*plan, *placement);
  } else {
    status = plan.status();
  }
  if (!status.ok()) {  // not cached: the next request tries again
    absl::MutexLock cache_lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second == entry) cache_.erase(it);
    return status;
  }
  entry->plan = std::make_shared<const CompiledPlan>(*std::move(plan));
  entry->done = true;
  return entry->plan;
}

std::string Coordinator::NextRequestId(const std::string& client_id) {
  return absl::StrCat("req", next_request_.fetch_add(1),
                      client_id.empty() ? "" : "-", client_id.substr(0, 64));
}

absl::StatusOr<InferResponse> Coordinator::Infer(const InferRequest& request) {
  MS_ASSIGN_OR_RETURN(Validated v, Validate(request));
  absl::Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<const Placement> placement = CurrentPlacement(request.model);
    if (placement == nullptr) {
      return Unavailable("model '", request.model, "' is not placed yet (waiting for ",
                         options_.min_workers, " workers)");
    }
    int64_t failed_worker = -1;
    absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan = GetOrCompile(v, placement);
    absl::StatusOr<InferResponse> response =
        plan.ok() ? RunOnce(v, request, *placement, **plan, &failed_worker) : plan.status();
    if (response.ok() || !absl::IsUnavailable(response.status()) || attempt == 1) {
      return response;
    }
    last = response.status();
    // A worker failed. Inference is idempotent, so retry once: on the new
    // generation if the model moves soon (the control loop probes the suspect
    // and re-places without it), or on the same one if the probe finds the
    // worker alive (a transient failure, e.g. a worker that joined in this
    // generation and timed out dialling a peer). Give up when the worker is
    // still suspect and nothing moved within retry_wait.
    const int64_t old_generation = placement->generation;
    const absl::Time give_up = absl::Now() + options_.retry_wait;
    bool moved = false;
    bool alive = false;
    while (absl::Now() < give_up && !moved && !alive) {
      absl::SleepFor(absl::Milliseconds(20));
      std::shared_ptr<const Placement> now = CurrentPlacement(request.model);
      moved = now != nullptr && now->generation != old_generation;
      alive = failed_worker >= 0 && registry_.IsAlive(failed_worker) &&
              !registry_.IsSuspect(failed_worker);
    }
    if (!moved && !alive) return last;
    MS_LOG(INFO) << "retrying request on model '" << request.model << "' ("
                 << (moved ? "new generation" : "worker alive") << ") after worker "
                 << failed_worker << " failed: " << last;
  }
  return last;
}

namespace {

// One Execute per worker with all of its input slices.
absl::StatusOr<std::map<int64_t, ExecuteCall>> BuildCalls(
    const CompiledPlan& plan, const std::map<std::string, const InferInput*>& inputs,
    const std::string& request_id, absl::Duration timeout) {
  std::map<int64_t, ExecuteCall> calls;
  for (const auto& [worker, program] : plan.programs) {
    ExecuteCall& call = calls[worker];
    call.program_id = plan.program_id;
    call.request_id = request_id;
    call.deadline_ms = absl::ToInt64Milliseconds(timeout);
  }
  std::map<std::string, BoxTensor> full;
  for (const auto& [name, in] : inputs) {
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(in->dtype, in->shape, in->data),
                        "input '", name, "'");
    full[name] = BoxTensor{Box::FromShape(in->shape), std::move(t)};
  }
  for (const InputSlice& s : plan.input_slices) {
    auto it = full.find(s.input);
    if (it == full.end()) return Internal("plan slices unknown input '", s.input, "'");
    SliceIr slice;
    slice.name = s.input;
    slice.device = s.device;
    slice.box = BoxToIr(s.box);
    slice.dtype = DTypeToProto(it->second.tensor.dtype());
    MS_ASSIGN_OR_RETURN(slice.data, ExtractBox(it->second, s.box), "input '", s.input,
                        "' box ", s.box.ToString());
    auto call = calls.find(s.worker);
    if (call == calls.end()) {
      call = calls.emplace(s.worker, ExecuteCall{plan.program_id, request_id, {},
                                                 absl::ToInt64Milliseconds(timeout)})
                 .first;
    }
    call->second.inputs.push_back(std::move(slice));
  }
  return calls;
}

}  // namespace

absl::StatusOr<InferResponse> Coordinator::RunOnce(const Validated& v,
                                                   const InferRequest& request,
                                                   const Placement& placement,
                                                   const CompiledPlan& plan,
                                                   int64_t* failed_worker) {
  const std::string request_id = NextRequestId(request.id);
  const absl::Duration timeout =
      request.timeout > absl::ZeroDuration() ? request.timeout : options_.execute_timeout;
  MS_ASSIGN_OR_RETURN(auto calls, BuildCalls(plan, v.inputs, request_id, timeout));
  std::vector<int64_t> ids;
  for (const auto& [id, call] : calls) ids.push_back(id);
  std::vector<absl::StatusOr<ExecuteResult>> results(ids.size(),
                                                     absl::UnknownError("not run"));
  // The first worker whose Execute fails cancels the request on every other
  // worker at once, so peers blocked on a receive from it return now instead of
  // at the deadline.
  absl::Mutex cancel_mu;
  int first_failed = -1;  // guarded by cancel_mu
  auto cancel_others = [&](size_t failed) {
    {
      absl::MutexLock lock(&cancel_mu);
      if (first_failed >= 0) return;
      first_failed = static_cast<int>(failed);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i == failed) continue;
      auto addr = placement.worker_addresses.find(ids[i]);
      if (addr == placement.worker_addresses.end()) continue;
      auto client = Client(ids[i], addr->second);
      if (client.ok()) {
        (*client)->Cancel(request_id, absl::StrCat("worker ", ids[failed], " failed"),
                          options_.control_timeout).IgnoreError();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      auto addr = placement.worker_addresses.find(ids[i]);
      absl::StatusOr<std::shared_ptr<WorkerClient>> client =
          addr == placement.worker_addresses.end()
              ? Internal("worker ", ids[i], " outside the placement")
              : Client(ids[i], addr->second);
      // Each thread moves its own call out (the map itself is not modified).
      results[i] = client.ok() ? (*client)->Execute(std::move(calls.at(ids[i])), timeout)
                               : client.status();
      if (!results[i].ok()) cancel_others(i);
    });
  }
  for (auto& t : threads) t.join();
  // The first failure is the cause; the others mostly report the cancellation
  // it caused.
  // (Every thread has joined: first_failed is no longer written.)
  const int bad = first_failed;
  if (bad >= 0) {
    const absl::Status s = results[bad].status();
    const int64_t worker = ids[bad];
    *failed_worker = worker;
    const std::string where = absl::StrCat("worker ", worker, " (",
                                           placement.worker_addresses.at(worker),
                                           ") failed request ", request_id);
    if (IsWorkerFailure(s)) {
      registry_.MarkSuspect(worker);
      return Unavailable(where, ": ", s.message());
    }
    return AnnotateStatus(s, where);
  }
  // Assemble each output from its pieces.
  std::map<int64_t, const ExecuteResult*> by_worker;
  for (size_t i = 0; i < ids.size(); ++i) by_worker[ids[i]] = &*results[i];
  InferResponse response;
  response.model = request.model;
  response.id = request.id;
  response.generation = placement.generation;
  for (const PlanOutput& out : plan.outputs) {
    if (std::find(v.outputs.begin(), v.outputs.end(), out.name) == v.outputs.end()) continue;
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(out.dtype, out.shape), "output '",
                        out.name, "'");
    BoxTensor assembled{Box::FromShape(out.shape), std::move(t)};
    for (const OutputPiece& piece : plan.output_pieces) {
      if (piece.output != out.name) continue;
      const BoxIr want = BoxToIr(piece.box);
      const SliceIr* found = nullptr;
      auto it = by_worker.find(piece.worker);
      if (it != by_worker.end()) {
        for (const SliceIr& s : it->second->outputs) {
          if (s.name == out.name && s.device == piece.device && s.box == want) found = &s;
        }
      }
      if (found == nullptr) {
        return Internal("worker ", piece.worker, " did not return output '", out.name,
                        "' box ", piece.box.ToString(), " of device ", piece.device);
      }
      if (found->dtype != DTypeToProto(out.dtype)) {
        return Internal("worker ", piece.worker, " returned output '", out.name,
                        "' with wire dtype ", found->dtype, ", expected ",
                        DTypeName(out.dtype));
      }
      MS_RETURN_IF_ERROR(InsertBox(&assembled, piece.box, found->data, false),
                         "worker ", piece.worker, " output '", out.name, "'");
    }
    InferOutput result;
    result.name = out.name;
    result.dtype = out.dtype;
    result.shape = out.shape;
    result.type_str = out.type_str;
    result.data = std::string(assembled.tensor.bytes());
    response.outputs.push_back(std::move(result));
  }
  return response;
}

absl::StatusOr<DescribeResult> Coordinator::Describe(const std::string& model,
                                                     const InputShapes& input_shapes) {
  InferRequest probe;
  probe.model = model;
  std::shared_ptr<const ModelFile> file;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return NotFound("model '", model, "' not found");
    if (!it->second.error.ok()) {
      return FailedPrecondition("model '", model, "' cannot be served: ",
                                it->second.error.message());
    }
    file = it->second.model;
  }
  std::shared_ptr<const Placement> placement = CurrentPlacement(model);
  if (placement == nullptr) {
    // Describe on the model's own mesh (a -1 axis as 1) until it is placed.
    std::vector<PlacementWorker> nominal = {{0, "unplaced"}};
    MS_ASSIGN_OR_RETURN(Placement p, ComputePlacement(*file, nominal, 0));
    return compiler_->Describe(*file, p.Devices(), input_shapes);
  }
  return compiler_->Describe(*file, placement->Devices(), input_shapes);
}

}  // namespace meshserve
