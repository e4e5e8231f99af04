#include "common/program/program_proto.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"

namespace meshserve {
namespace {

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

// A step's dtype field: DTYPE_INVALID is unset; a number tensor.proto does
// not define (proto3 enums are open) is refused, named.
absl::StatusOr<std::optional<DType>> StepDType(DTypeProto dtype) {
  return OptionalDTypeFromProto(static_cast<int>(dtype));
}
// A slice's: an unknown number decodes as unset, which BoxTensorFromSlice
// (ir_conv.h) refuses; a slice always needs one.
std::optional<DType> SliceDType(DTypeProto dtype) {
  absl::StatusOr<std::optional<DType>> parsed = OptionalDTypeFromProto(static_cast<int>(dtype));
  return parsed.ok() ? *parsed : std::nullopt;
}
DTypeProto AsDTypeProto(std::optional<DType> dtype) {
  return static_cast<DTypeProto>(OptionalDTypeToProto(dtype));
}

// One conversion per kind, both ways.

absl::StatusOr<ComputeStepIr> ComputeToIr(const ComputeStep& c) {
  ComputeStepIr ir;
  MS_ASSIGN_OR_RETURN(ir.op, ParseComputeOp(c.op()));
  ir.inputs.assign(c.inputs().begin(), c.inputs().end());
  ir.output = c.output();
  ir.out_box = BoxToIr(c.out_box());
  MS_ASSIGN_OR_RETURN(ir.out_dtype, StepDType(c.out_dtype()), "out_dtype");
  ir.lhs_contracting = Ints(c.lhs_contracting());
  ir.rhs_contracting = Ints(c.rhs_contracting());
  ir.lhs_batch = Ints(c.lhs_batch());
  ir.rhs_batch = Ints(c.rhs_batch());
  ir.perm = Ints(c.perm());
  ir.epsilon = c.epsilon();
  ir.partial = c.partial();
  ir.device = c.device();
  ir.scale = c.scale();
  ir.causal = c.causal();
  ir.theta = c.theta();
  ir.vocab_size = c.vocab_size();
  ir.positions_axis = c.positions_axis();
  ir.rope_seq_axis = c.rope_seq_axis();
  ir.softmax_axis = c.has_softmax_axis() ? c.softmax_axis() : -1;
  ir.attention_scale = c.attention_scale();
  ir.cache_layer = c.cache_layer();
  ir.num_cache_layers = c.num_cache_layers();
  return ir;
}

void ComputeFromIr(const ComputeStepIr& ir, ComputeStep* c) {
  c->set_op(std::string(ComputeOpName(ir.op)));
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
  c->set_device(ir.device);
  c->set_scale(ir.scale);
  c->set_causal(ir.causal);
  c->set_theta(ir.theta);
  c->set_vocab_size(ir.vocab_size);
  c->set_positions_axis(ir.positions_axis);
  c->set_rope_seq_axis(ir.rope_seq_axis);
  if (ir.softmax_axis != -1) c->set_softmax_axis(ir.softmax_axis);  // absent: -1
  c->set_attention_scale(ir.attention_scale);
  c->set_cache_layer(ir.cache_layer);
  c->set_num_cache_layers(ir.num_cache_layers);
}

SendStepIr SendToIr(const SendStep& s) {
  return SendStepIr{s.buffer(), BoxToIr(s.box()), s.dst_worker(), s.dst_device(), s.tag(),
                    s.device()};
}

// The (buffer, box) pair that starts SendStep, RecvStep and OutputStep.
template <typename StepMessage>
void SetBufferAndBox(const std::string& buffer, const BoxIr& box, StepMessage* step) {
  step->set_buffer(buffer);
  BoxFromIr(box, step->mutable_box());
}

void SendFromIr(const SendStepIr& ir, SendStep* s) {
  SetBufferAndBox(ir.buffer, ir.box, s);
  s->set_dst_worker(ir.dst_worker);
  s->set_dst_device(ir.dst_device);
  s->set_tag(ir.tag);
  s->set_device(ir.device);
}

absl::StatusOr<RecvStepIr> RecvToIr(const RecvStep& r) {
  MS_ASSIGN_OR_RETURN(std::optional<DType> dtype, StepDType(r.dtype()), "recv dtype");
  return RecvStepIr{r.buffer(),  BoxToIr(r.box()), r.tag(), r.accumulate(),
                    BoxToIr(r.buffer_box()), dtype, r.src_worker(), r.device()};
}

void RecvFromIr(const RecvStepIr& ir, RecvStep* r) {
  SetBufferAndBox(ir.buffer, ir.box, r);
  r->set_tag(ir.tag);
  r->set_accumulate(ir.accumulate);
  BoxFromIr(ir.buffer_box, r->mutable_buffer_box());
  r->set_dtype(AsDTypeProto(ir.dtype));
  r->set_src_worker(ir.src_worker);
  r->set_device(ir.device);
}

absl::StatusOr<CopyStepIr> CopyToIr(const CopyStep& c) {
  MS_ASSIGN_OR_RETURN(std::optional<DType> dtype, StepDType(c.dtype()), "copy dtype");
  return CopyStepIr{c.src(),        c.src_device(),   c.dst(),
                    BoxToIr(c.box()), c.accumulate(), BoxToIr(c.dst_box()),
                    dtype,          c.dst_device()};
}

void CopyFromIr(const CopyStepIr& ir, CopyStep* c) {
  c->set_src(ir.src);
  c->set_src_device(ir.src_device);
  c->set_dst(ir.dst);
  BoxFromIr(ir.box, c->mutable_box());
  c->set_accumulate(ir.accumulate);
  BoxFromIr(ir.dst_box, c->mutable_dst_box());
  c->set_dtype(AsDTypeProto(ir.dtype));
  c->set_dst_device(ir.dst_device);
}

FreeStepIr FreeToIr(const FreeStep& f) { return FreeStepIr{f.buffer(), f.device()}; }

void FreeFromIr(const FreeStepIr& ir, FreeStep* f) {
  f->set_buffer(ir.buffer);
  f->set_device(ir.device);
}

OutputStepIr OutputToIr(const OutputStep& o) {
  return OutputStepIr{o.buffer(), BoxToIr(o.box()), o.output(), o.device()};
}

void OutputFromIr(const OutputStepIr& ir, OutputStep* o) {
  SetBufferAndBox(ir.buffer, ir.box, o);
  o->set_output(ir.output);
  o->set_device(ir.device);
}

absl::StatusOr<StepIr> StepToIr(const Step& step) {
  switch (step.kind_case()) {
    case Step::kCompute: return ComputeToIr(step.compute());
    case Step::kSend: return SendToIr(step.send());
    case Step::kRecv: return RecvToIr(step.recv());
    case Step::kCopy: return CopyToIr(step.copy());
    case Step::kFree: return FreeToIr(step.free());
    case Step::kOutput: return OutputToIr(step.output());
    case Step::KIND_NOT_SET: break;
  }
  return InvalidArgument("step has no kind");
}

struct StepFromIr {
  Step* step;
  void operator()(const ComputeStepIr& ir) const { ComputeFromIr(ir, step->mutable_compute()); }
  void operator()(const SendStepIr& ir) const { SendFromIr(ir, step->mutable_send()); }
  void operator()(const RecvStepIr& ir) const { RecvFromIr(ir, step->mutable_recv()); }
  void operator()(const CopyStepIr& ir) const { CopyFromIr(ir, step->mutable_copy()); }
  void operator()(const FreeStepIr& ir) const { FreeFromIr(ir, step->mutable_free()); }
  void operator()(const OutputStepIr& ir) const { OutputFromIr(ir, step->mutable_output()); }
};

}  // namespace

absl::StatusOr<ProgramIr> ProgramToIr(const Program& program) {
  ProgramIr ir;
  ir.program_id = program.program_id();
  ir.model = program.model();
  ir.generation = program.generation();
  ir.worker = program.worker();
  ir.steps.reserve(program.steps_size());
  for (int i = 0; i < program.steps_size(); ++i) {
    MS_ASSIGN_OR_RETURN(StepIr step, StepToIr(program.steps(i)), "program '",
                        program.program_id(), "' step ", i);
    ir.steps.push_back(std::move(step));
  }
  ir.param_only_steps.assign(program.param_only_steps().begin(),
                             program.param_only_steps().end());
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
  for (const StepIr& step : ir.steps) std::visit(StepFromIr{program->add_steps()}, step);
  for (int64_t i : ir.param_only_steps) program->add_param_only_steps(i);
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
  ir.version = request.version() == 0 ? 1 : request.version();
  ir.replica_devices = Ints(request.replica_devices());
  for (const ParamPiece& piece : request.sources()) ir.sources.push_back(ParamPieceToIr(piece));
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
  request->set_version(ir.version);
  SetInts(ir.replica_devices, request->mutable_replica_devices());
  for (const ParamPieceIr& piece : ir.sources) ParamPieceFromIr(piece, request->add_sources());
}

ParamPieceIr ParamPieceToIr(const ParamPiece& piece) {
  return ParamPieceIr{piece.param(), BoxToIr(piece.box()), piece.src_worker(),
                      piece.src_generation(), piece.src_version()};
}

void ParamPieceFromIr(const ParamPieceIr& ir, ParamPiece* piece) {
  piece->set_param(ir.param);
  BoxFromIr(ir.box, piece->mutable_box());
  piece->set_src_worker(ir.src_worker);
  piece->set_src_generation(ir.src_generation);
  piece->set_src_version(ir.src_version);
}

ReadParamIr ReadParamToIr(const ReadParamRequest& request) {
  return ReadParamIr{request.model(), request.generation(), request.version(),
                     request.param(), BoxToIr(request.box())};
}

void ReadParamFromIr(const ReadParamIr& ir, ReadParamRequest* request) {
  request->set_model(ir.model);
  request->set_generation(ir.generation);
  request->set_version(ir.version);
  request->set_param(ir.param);
  BoxFromIr(ir.box, request->mutable_box());
}

StageChunkIr StageChunkToIr(StageParamChunk* chunk) {
  StageChunkIr ir;
  ir.model = chunk->model();
  ir.generation = chunk->generation();
  ir.version = chunk->version();
  ir.param = chunk->param();
  ir.box = BoxToIr(chunk->box());
  ir.total_bytes = chunk->total_bytes();
  ir.offset = chunk->offset();
  ir.data = std::move(*chunk->mutable_data());
  return ir;
}

void StageChunkFromIr(const StageChunkIr& ir, StageParamChunk* chunk) {
  chunk->set_model(ir.model);
  chunk->set_generation(ir.generation);
  chunk->set_version(ir.version);
  chunk->set_param(ir.param);
  BoxFromIr(ir.box, chunk->mutable_box());
  chunk->set_total_bytes(ir.total_bytes);
  chunk->set_offset(ir.offset);
  chunk->set_data(ir.data);
}

CommitParamsIr CommitParamsToIr(const CommitParamsRequest& request) {
  CommitParamsIr ir;
  ir.model = request.model();
  ir.generation = request.generation();
  ir.base_version = request.base_version();
  ir.version = request.version();
  for (const std::string& p : request.params()) ir.params.push_back(p);
  for (const ParamPiece& piece : request.fills()) ir.fills.push_back(ParamPieceToIr(piece));
  return ir;
}

void CommitParamsFromIr(const CommitParamsIr& ir, CommitParamsRequest* request) {
  request->set_model(ir.model);
  request->set_generation(ir.generation);
  request->set_base_version(ir.base_version);
  request->set_version(ir.version);
  for (const std::string& p : ir.params) request->add_params(p);
  for (const ParamPieceIr& piece : ir.fills) ParamPieceFromIr(piece, request->add_fills());
}

SliceIr SliceToIr(TensorSlice* slice) {
  SliceIr ir;
  ir.name = slice->name();
  ir.device = slice->device();
  ir.box = BoxToIr(slice->box());
  ir.dtype = SliceDType(slice->dtype());
  ir.data = std::move(*slice->mutable_data());
  return ir;
}

void SliceFromIr(SliceIr* ir, TensorSlice* slice) {
  std::string data = std::move(ir->data);
  ir->data.clear();  // a moved-from string is unspecified: copy nothing below
  SliceFromIr(*ir, slice);
  *slice->mutable_data() = std::move(data);
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
    hosted->set_version(model.version);
    SetInts(model.replica_devices, hosted->mutable_replica_devices());
    for (const MeshAxisIr& a : model.mesh) {
      auto* axis = hosted->mutable_mesh()->add_axes();
      axis->set_name(a.name);
      axis->set_size(a.size);
      axis->set_type(a.type);
    }
    SetInts(model.device_workers, hosted->mutable_device_workers());
  }
  response->set_programs(status.programs);
  response->set_requests_served(status.requests_served);
  response->set_gemm_gflops_one_row(status.gemm_gflops_one_row);
  response->set_gemm_gflops_small_m(status.gemm_gflops_small_m);
  response->set_gemm_gflops_large_m(status.gemm_gflops_large_m);
  response->set_memory_bytes_per_s(status.memory_bytes_per_s);
  response->set_hop_ms(status.hop_ms);
  response->set_link_bytes_per_s(status.link_bytes_per_s);
  response->set_calibration_kernel(status.calibration_kernel);
}

WorkerStatusIr WorkerStatusFromProto(const WorkerStatusResponse& response) {
  WorkerStatusIr status;
  status.worker_id = response.worker_id();
  status.address = response.address();
  status.blas_core = response.blas_core();
  status.blas_config = response.blas_config();
  status.blas_threads = response.blas_threads();
  for (const auto& m : response.models()) {
    HostedModelIr hosted;
    hosted.model = m.model();
    hosted.generation = m.generation();
    hosted.devices = Ints(m.devices());
    hosted.param_bytes = m.param_bytes();
    hosted.version = m.version() == 0 ? 1 : m.version();
    hosted.replica_devices = Ints(m.replica_devices());
    for (const auto& axis : m.mesh().axes()) {
      hosted.mesh.push_back(MeshAxisIr{axis.name(), axis.size(), axis.type()});
    }
    hosted.device_workers = Ints(m.device_workers());
    status.models.push_back(std::move(hosted));
  }
  status.programs = response.programs();
  status.requests_served = response.requests_served();
  status.gemm_gflops_one_row = response.gemm_gflops_one_row();
  status.gemm_gflops_small_m = response.gemm_gflops_small_m();
  status.gemm_gflops_large_m = response.gemm_gflops_large_m();
  status.memory_bytes_per_s = response.memory_bytes_per_s();
  status.hop_ms = response.hop_ms();
  status.link_bytes_per_s = response.link_bytes_per_s();
  status.calibration_kernel = response.calibration_kernel();
  return status;
}

}  // namespace meshserve
