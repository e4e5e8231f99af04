#include "common/program/program_proto.h"

#include <string>
#include <utility>
#include <vector>

#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"

namespace meshserve {
namespace {

constexpr bool Same(int a, int b) { return a == b; }
static_assert(Same(kWireInvalid, DTYPE_INVALID) && Same(kWireFloat32, FLOAT32) &&
                  Same(kWireBFloat16, BFLOAT16) && Same(kWireInt32, INT32) &&
                  Same(kWireInt64, INT64) && Same(kWireFloat16, FLOAT16) &&
                  Same(kWireFloat64, FLOAT64) && Same(kWireInt8, INT8) &&
                  Same(kWireUInt8, UINT8) && Same(kWireBool, BOOL),
              "program_ir.h's WireDType must match tensor.proto's DTypeProto");

BoxIr BoxToIr(const BoxProto& box) {
  BoxIr out;
  out.begin.assign(box.begin().begin(), box.begin().end());
  out.end.assign(box.end().begin(), box.end().end());
  return out;
}

void BoxFromIr(const BoxIr& ir, BoxProto* box) {
  box->Clear();
  for (int64_t b : ir.begin) box->add_begin(b);
  for (int64_t e : ir.end) box->add_end(e);
}

template <typename Field>
std::vector<int64_t> Ints(const Field& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

template <typename Field>
void SetInts(const std::vector<int64_t>& values, Field* field) {
  field->Clear();
  for (int64_t v : values) field->Add(v);
}

StepIr StepToIr(const Step& step) {
  StepIr ir;
  switch (step.kind_case()) {
    case Step::kCompute: {
      const auto& c = step.compute();
      ir.kind = StepIr::Kind::kCompute;
      ir.device = c.device();
      ir.op = c.op();
      ir.inputs.assign(c.inputs().begin(), c.inputs().end());
      ir.output = c.output();
      ir.out_box = BoxToIr(c.out_box());
      ir.out_dtype = static_cast<int>(c.out_dtype());
      ir.lhs_contracting = Ints(c.lhs_contracting());
      ir.rhs_contracting = Ints(c.rhs_contracting());
      ir.lhs_batch = Ints(c.lhs_batch());
      ir.rhs_batch = Ints(c.rhs_batch());
      ir.perm = Ints(c.perm());
      ir.epsilon = c.epsilon();
      ir.partial = c.partial();
      break;
    }
    case Step::kSend: {
      const auto& s = step.send();
      ir.kind = StepIr::Kind::kSend;
      ir.device = s.device();
      ir.buffer = s.buffer();
      ir.box = BoxToIr(s.box());
      ir.dst_worker = s.dst_worker();
      ir.dst_device = s.dst_device();
      ir.tag = s.tag();
      break;
    }
    case Step::kRecv: {
      const auto& r = step.recv();
      ir.kind = StepIr::Kind::kRecv;
      ir.device = r.device();
      ir.buffer = r.buffer();
      ir.box = BoxToIr(r.box());
      ir.tag = r.tag();
      ir.accumulate = r.accumulate();
      ir.buffer_box = BoxToIr(r.buffer_box());
      ir.dtype = static_cast<int>(r.dtype());
      ir.src_worker = r.src_worker();
      break;
    }
    case Step::kCopy: {
      const auto& c = step.copy();
      ir.kind = StepIr::Kind::kCopy;
      ir.device = c.src_device();
      ir.buffer = c.src();
      ir.dst = c.dst();
      ir.box = BoxToIr(c.box());
      ir.accumulate = c.accumulate();
      ir.buffer_box = BoxToIr(c.dst_box());
      ir.dtype = static_cast<int>(c.dtype());
      ir.dst_device = c.dst_device();
      break;
    }
    case Step::kFree:
      ir.kind = StepIr::Kind::kFree;
      ir.device = step.free().device();
      ir.buffer = step.free().buffer();
      break;
    case Step::kOutput: {
      const auto& o = step.output();
      ir.kind = StepIr::Kind::kOutput;
      ir.device = o.device();
      ir.buffer = o.buffer();
      ir.box = BoxToIr(o.box());
      ir.output = o.output();
      break;
    }
    case Step::KIND_NOT_SET:
      break;
  }
  return ir;
}

// The IR keeps unknown numbers as they are (proto3 enums are open).
DTypeProto AsDTypeProto(int value) { return static_cast<DTypeProto>(value); }

void StepFromIr(const StepIr& ir, Step* step) {
  switch (ir.kind) {
    case StepIr::Kind::kCompute: {
      auto* c = step->mutable_compute();
      c->set_device(ir.device);
      c->set_op(ir.op);
      for (const std::string& in : ir.inputs) c->add_inputs(in);
      c->set_output(ir.output);
      BoxFromIr(ir.out_box, c->mutable_out_box());
      c->set_out_dtype(AsDTypeProto(ir.out_dtype));
      SetInts(ir.lhs_contracting, c->mutable_lhs_contracting());
      SetInts(ir.rhs_contracting, c->mutable_rhs_contracting());
      SetInts(ir.lhs_batch, c->mutable_lhs_batch());
      SetInts(ir.rhs_batch, c->mutable_rhs_batch());
      SetInts(ir.perm, c->mutable_perm());
      c->set_epsilon(ir.epsilon);
      c->set_partial(ir.partial);
      break;
    }
    case StepIr::Kind::kSend: {
      auto* s = step->mutable_send();
      s->set_device(ir.device);
      s->set_buffer(ir.buffer);
      BoxFromIr(ir.box, s->mutable_box());
      s->set_dst_worker(ir.dst_worker);
      s->set_dst_device(ir.dst_device);
      s->set_tag(ir.tag);
      break;
    }
    case StepIr::Kind::kRecv: {
      auto* r = step->mutable_recv();
      r->set_device(ir.device);
      r->set_buffer(ir.buffer);
      BoxFromIr(ir.box, r->mutable_box());
      r->set_tag(ir.tag);
      r->set_accumulate(ir.accumulate);
      BoxFromIr(ir.buffer_box, r->mutable_buffer_box());
      r->set_dtype(AsDTypeProto(ir.dtype));
      r->set_src_worker(ir.src_worker);
      break;
    }
    case StepIr::Kind::kCopy: {
      auto* c = step->mutable_copy();
      c->set_src_device(ir.device);
      c->set_src(ir.buffer);
      c->set_dst(ir.dst);
      BoxFromIr(ir.box, c->mutable_box());
      c->set_accumulate(ir.accumulate);
      BoxFromIr(ir.buffer_box, c->mutable_dst_box());
      c->set_dtype(AsDTypeProto(ir.dtype));
      c->set_dst_device(ir.dst_device);
      break;
    }
    case StepIr::Kind::kFree:
      step->mutable_free()->set_device(ir.device);
      step->mutable_free()->set_buffer(ir.buffer);
      break;
    case StepIr::Kind::kOutput: {
      auto* o = step->mutable_output();
      o->set_device(ir.device);
      o->set_buffer(ir.buffer);
      BoxFromIr(ir.box, o->mutable_box());
      o->set_output(ir.output);
      break;
    }
    case StepIr::Kind::kNone:
      break;
  }
}

}  // namespace

ProgramIr ProgramToIr(const Program& program) {
  ProgramIr ir;
  ir.program_id = program.program_id();
  ir.model = program.model();
  ir.generation = program.generation();
  ir.worker = program.worker();
  ir.steps.reserve(program.steps_size());
  for (const Step& step : program.steps()) ir.steps.push_back(StepToIr(step));
  return ir;
}

std::string SerializeProgram(const ProgramIr& ir) {
  Program program;
  ProgramFromIr(ir, &program);
  return program.SerializeAsString();
}

void ProgramFromIr(const ProgramIr& ir, Program* program) {
  program->Clear();
  program->set_program_id(ir.program_id);
  program->set_model(ir.model);
  program->set_generation(ir.generation);
  program->set_worker(ir.worker);
  for (const StepIr& step : ir.steps) StepFromIr(step, program->add_steps());
}

LoadModelIr LoadModelToIr(const LoadModelRequest& request) {
  LoadModelIr ir;
  ir.model = request.model();
  ir.generation = request.generation();
  ir.model_json = request.model_json();
  ir.model_dir = request.model_dir();
  for (const auto& axis : request.mesh().axes()) {
    ir.mesh.push_back(MeshAxisIr{axis.name(), axis.size(), axis.type()});
  }
  ir.devices = Ints(request.devices());
  ir.device_workers = Ints(request.device_workers());
  for (const auto& [worker, address] : request.worker_addresses()) {
    ir.worker_addresses[worker] = address;
  }
  return ir;
}

void LoadModelFromIr(const LoadModelIr& ir, LoadModelRequest* request) {
  request->set_model(ir.model);
  request->set_generation(ir.generation);
  request->set_model_json(ir.model_json);
  request->set_model_dir(ir.model_dir);
  for (const MeshAxisIr& a : ir.mesh) {
    auto* axis = request->mutable_mesh()->add_axes();
    axis->set_name(a.name);
    axis->set_size(a.size);
    axis->set_type(a.type);
  }
  SetInts(ir.devices, request->mutable_devices());
  SetInts(ir.device_workers, request->mutable_device_workers());
  for (const auto& [worker, address] : ir.worker_addresses) {
    (*request->mutable_worker_addresses())[worker] = address;
  }
}

SliceIr SliceToIr(TensorSlice* slice) {
  SliceIr ir;
  ir.name = slice->name();
  ir.device = slice->device();
  ir.box = BoxToIr(slice->box());
  ir.dtype = static_cast<int>(slice->dtype());
  ir.data = std::move(*slice->mutable_data());
  return ir;
}

void SliceFromIr(SliceIr* ir, TensorSlice* slice) {
  slice->set_name(ir->name);
  slice->set_device(ir->device);
  BoxFromIr(ir->box, slice->mutable_box());
  slice->set_dtype(AsDTypeProto(ir->dtype));
  *slice->mutable_data() = std::move(ir->data);
}

void SliceFromIr(const SliceIr& ir, TensorSlice* slice) {
  slice->set_name(ir.name);
  slice->set_device(ir.device);
  BoxFromIr(ir.box, slice->mutable_box());
  slice->set_dtype(AsDTypeProto(ir.dtype));
  slice->set_data(ir.data);
}

void WorkerStatusToProto(const WorkerStatusIr& status, WorkerStatusResponse* response) {
  response->set_worker_id(status.worker_id);
  response->set_address(status.address);
  response->set_blas_core(status.blas_core);
  response->set_blas_config(status.blas_config);
  response->set_blas_threads(status.blas_threads);
  for (const HostedModelIr& model : status.models) {
    auto* hosted = response->add_models();
    hosted->set_model(model.model);
    hosted->set_generation(model.generation);
    for (int64_t d : model.devices) hosted->add_devices(d);
    hosted->set_param_bytes(model.param_bytes);
  }
  response->set_programs(status.programs);
  response->set_requests_served(status.requests_served);
}

WorkerStatusIr WorkerStatusFromProto(const WorkerStatusResponse& response) {
  WorkerStatusIr status;
  status.worker_id = response.worker_id();
  status.address = response.address();
  status.blas_core = response.blas_core();
  status.blas_config = response.blas_config();
  status.blas_threads = response.blas_threads();
  for (const auto& m : response.models()) {
    status.models.push_back({m.model(), m.generation(), Ints(m.devices()), m.param_bytes()});
  }
  status.programs = response.programs();
  status.requests_served = response.requests_served();
  return status;
}

}  // namespace meshserve
