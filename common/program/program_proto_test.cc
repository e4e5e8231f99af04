// The program IR survives a round trip through the generated messages
// (program_proto.h).
#include "common/program/program_proto.h"

#include <string>
#include <utility>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/decode_step.h"
#include "common/program/decode_step_proto.h"
#include "common/program/ir_conv.h"
#include "common/program/testing/program_ir_builder.h"
#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using namespace ::meshserve::program_testing;  // NOLINT

ProgramIr EveryStepKind() {
  ComputeStepIr compute = Compute(2, ComputeOp::kDotGeneral, {"in/x", "param/w"}, "t0/y",
                                      IrBox({{0, 4}, {0, 8}}), DType::kBFloat16);
  compute.lhs_contracting = {1};
  compute.rhs_contracting = {0};
  compute.lhs_batch = {};
  compute.rhs_batch = {};
  compute.perm = {1, 0};
  compute.epsilon = 1e-5f;
  compute.partial = true;
  compute.scale = 0.125f;
  compute.causal = true;
  compute.theta = 500000.0;
  compute.vocab_size = 50257;
  compute.positions_axis = 2;
  compute.rope_seq_axis = -2;
  compute.softmax_axis = 1;
  return ProgramOf(
      "prog", "m", 3, 1,
      {compute, Send(2, "t0/y", IrBox({{0, 2}, {0, 8}}), 0, 5, "prog/0"),
       Recv(3, "t1/z", IrBox({{2, 4}, {0, 8}}), "prog/1", /*accumulate=*/true,
                IrBox({{0, 4}, {0, 8}}), DType::kFloat32, 0),
       Copy(2, "t0/y", IrBox({{0, 2}, {0, 8}}), 3, "t1/z", IrBox({{0, 4}, {0, 8}}),
                DType::kFloat32, /*accumulate=*/true),
       Free(2, "t0/y"), Output(3, "t1/z", IrBox({{0, 4}, {0, 8}}), "y")});
}

TEST(ProgramProtoTest, ProgramRoundTripsThroughProto) {
  ProgramIr ir = EveryStepKind();
  ir.param_only_steps = {1, 2, 4};
  Program proto;
  ProgramFromIr(ir, &proto);
  ASSERT_EQ(proto.steps_size(), 6);
  EXPECT_THAT(proto.param_only_steps(), ElementsAre(1, 2, 4));
  EXPECT_EQ(proto.steps(0).compute().op(), "dot_general");
  EXPECT_EQ(proto.steps(0).compute().out_dtype(), BFLOAT16);
  EXPECT_EQ(proto.steps(0).compute().scale(), 0.125f);
  EXPECT_TRUE(proto.steps(0).compute().causal());
  EXPECT_EQ(proto.steps(0).compute().theta(), 500000.0);
  EXPECT_EQ(proto.steps(0).compute().vocab_size(), 50257);
  EXPECT_EQ(proto.steps(0).compute().positions_axis(), 2);
  EXPECT_EQ(proto.steps(0).compute().rope_seq_axis(), -2);
  EXPECT_TRUE(proto.steps(0).compute().has_softmax_axis());
  EXPECT_EQ(proto.steps(0).compute().softmax_axis(), 1);
  EXPECT_THAT(proto.steps(0).compute().perm(), ElementsAre(1, 0));
  EXPECT_EQ(proto.steps(2).recv().dtype(), FLOAT32);
  EXPECT_THAT(proto.steps(3).copy().dst_box().end(), ElementsAre(4, 8));
  ASSERT_OK_AND_ASSIGN(const ProgramIr back, ProgramToIr(proto));
  EXPECT_EQ(SerializeProgram(back), SerializeProgram(ir));
  EXPECT_EQ(SerializeProgram(ir), proto.SerializeAsString());
  EXPECT_EQ(back.param_only_steps, ir.param_only_steps);
  ASSERT_EQ(back.steps.size(), ir.steps.size());
  for (size_t i = 0; i < ir.steps.size(); ++i) {
    EXPECT_EQ(back.steps[i].index(), ir.steps[i].index()) << i;
    EXPECT_EQ(StepDevice(back.steps[i]), StepDevice(ir.steps[i])) << i;
  }
  const auto& compute = std::get<ComputeStepIr>(back.steps[0]);
  EXPECT_EQ(compute.op, ComputeOp::kDotGeneral);
  EXPECT_EQ(compute.out_box, std::get<ComputeStepIr>(ir.steps[0]).out_box);
  EXPECT_EQ(compute.out_dtype, DType::kBFloat16);
  EXPECT_THAT(compute.perm, ElementsAre(1, 0));
  EXPECT_EQ(compute.positions_axis, 2);
  EXPECT_EQ(compute.rope_seq_axis, -2);
  EXPECT_EQ(compute.softmax_axis, 1);
  EXPECT_EQ(std::get<SendStepIr>(back.steps[1]).box, std::get<SendStepIr>(ir.steps[1]).box);
  const auto& recv = std::get<RecvStepIr>(back.steps[2]);
  EXPECT_EQ(recv.box, std::get<RecvStepIr>(ir.steps[2]).box);
  EXPECT_EQ(recv.buffer_box, std::get<RecvStepIr>(ir.steps[2]).buffer_box);
  const auto& copy = std::get<CopyStepIr>(back.steps[3]);
  EXPECT_EQ(copy.box, std::get<CopyStepIr>(ir.steps[3]).box);
  EXPECT_EQ(copy.dst_box, std::get<CopyStepIr>(ir.steps[3]).dst_box);
  EXPECT_EQ(copy.dst, "t1/z");
  EXPECT_EQ(copy.dst_device, 3);
  EXPECT_EQ(std::get<OutputStepIr>(back.steps[5]).box, std::get<OutputStepIr>(ir.steps[5]).box);
}

// softmax_axis is -1 (the last dim) both when the wire leaves it out and when
// the IR keeps the default; 0 is sent (the first dim), not dropped.
TEST(ProgramProtoTest, SoftmaxAxisAbsentIsTheLastDim) {
  Program proto;
  ComputeStep* softmax = proto.add_steps()->mutable_compute();
  softmax->set_op("softmax");
  ASSERT_OK_AND_ASSIGN(ProgramIr ir, ProgramToIr(proto));
  ComputeStepIr& step = std::get<ComputeStepIr>(ir.steps[0]);
  EXPECT_EQ(step.softmax_axis, -1);
  Program back;
  ProgramFromIr(ir, &back);
  EXPECT_FALSE(back.steps(0).compute().has_softmax_axis());
  step.softmax_axis = 0;
  ProgramFromIr(ir, &back);
  EXPECT_TRUE(back.steps(0).compute().has_softmax_axis());
  ASSERT_OK_AND_ASSIGN(ProgramIr again, ProgramToIr(back));
  EXPECT_EQ(std::get<ComputeStepIr>(again.steps[0]).softmax_axis, 0);
}

// What the typed IR cannot hold is rejected at the proto edge, naming the step.
TEST(ProgramProtoTest, UnknownComputeOpAndStepWithoutKindAreRejected) {
  Program proto;
  proto.set_program_id("bad");
  ComputeStep* conv = proto.add_steps()->mutable_compute();
  conv->set_op("conv");
  EXPECT_THAT(ProgramToIr(proto),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown compute op 'conv'"));
  EXPECT_THAT(ProgramToIr(proto), StatusIs(absl::StatusCode::kInvalidArgument, "step 0"));
  conv->set_op("relu");
  proto.add_steps();
  EXPECT_THAT(ProgramToIr(proto), StatusIs(absl::StatusCode::kInvalidArgument, "no kind"));
  EXPECT_THAT(ProgramToIr(proto), StatusIs(absl::StatusCode::kInvalidArgument, "step 1"));
}

TEST(ProgramProtoTest, LoadModelRoundTripsThroughProto) {
  LoadModelIr ir;
  ir.model = "m";
  ir.generation = 2;
  ir.model_json = "{}";
  ir.model_dir = "/models";
  ir.mesh = {{"data", 2, "Explicit"}, {"model", 4, ""}};
  ir.devices = {0, 1};
  ir.device_workers = {0, 0, 1, 1, 2, 2, 3, 3};
  ir.worker_addresses = {{0, "a:1"}, {1, "b:2"}};
  LoadModelRequest request;
  LoadModelFromIr(ir, &request);
  const LoadModelIr back = LoadModelToIr(request);
  EXPECT_EQ(back.model, ir.model);
  EXPECT_EQ(back.generation, ir.generation);
  EXPECT_EQ(back.model_json, ir.model_json);
  EXPECT_EQ(back.model_dir, ir.model_dir);
  ASSERT_EQ(back.mesh.size(), 2u);
  EXPECT_EQ(back.mesh[1].name, "model");
  EXPECT_EQ(back.mesh[1].size, 4);
  EXPECT_EQ(back.mesh[0].type, "Explicit");
  EXPECT_EQ(back.devices, ir.devices);
  EXPECT_EQ(back.device_workers, ir.device_workers);
  EXPECT_EQ(back.worker_addresses, ir.worker_addresses);
}

TEST(ProgramProtoTest, SliceRoundTripsThroughProto) {
  SliceIr ir{"x", 3, {{0, 2}, {4, 6}}, DType::kInt32, std::string(16, '\1')};
  TensorSlice copied;
  SliceFromIr(ir, &copied);
  EXPECT_EQ(copied.dtype(), INT32);
  SliceIr moved_from = ir;
  TensorSlice moved;
  SliceFromIr(&moved_from, &moved);
  EXPECT_EQ(moved.SerializeAsString(), copied.SerializeAsString());
  const SliceIr back = SliceToIr(&copied);
  EXPECT_EQ(back.name, ir.name);
  EXPECT_EQ(back.device, ir.device);
  EXPECT_EQ(back.box, ir.box);
  EXPECT_EQ(back.dtype, ir.dtype);
  EXPECT_EQ(back.data, ir.data);
}

// A slice's dtype number tensor.proto lacks decodes as unset, which
// BoxTensorFromSlice refuses; unset (DTYPE_INVALID) round-trips as nullopt.
TEST(ProgramProtoTest, SliceDTypesTheIRCannotHoldAreUnset) {
  TensorSlice proto;
  proto.set_name("x");
  proto.set_dtype(static_cast<DTypeProto>(42));
  proto.set_data("abcd");
  *proto.mutable_box() = BoxProto();
  proto.mutable_box()->add_begin(0);
  proto.mutable_box()->add_end(1);
  const SliceIr ir = SliceToIr(&proto);
  EXPECT_EQ(ir.dtype, std::nullopt);
  EXPECT_THAT(BoxTensorFromSlice(ir), StatusIs(absl::StatusCode::kInvalidArgument, "no dtype"));
  TensorSlice unset;
  SliceFromIr(SliceIr{"y", 0, {{0}, {1}}, std::nullopt, "abcd"}, &unset);
  EXPECT_EQ(unset.dtype(), DTYPE_INVALID);
  EXPECT_EQ(SliceToIr(&unset).dtype, std::nullopt);
}

// A step's dtype: DTYPE_INVALID is unset; a number tensor.proto lacks is
// refused at the edge, naming the step, the field and the number.
TEST(ProgramProtoTest, StepDTypesAreParsedAtTheEdge) {
  Program proto;
  proto.set_program_id("p");
  RecvStep* recv = proto.add_steps()->mutable_recv();
  ASSERT_OK_AND_ASSIGN(ProgramIr unset, ProgramToIr(proto));
  EXPECT_EQ(std::get<RecvStepIr>(unset.steps[0]).dtype, std::nullopt);
  recv->set_dtype(INT64);
  ASSERT_OK_AND_ASSIGN(ProgramIr set, ProgramToIr(proto));
  EXPECT_EQ(std::get<RecvStepIr>(set.steps[0]).dtype, DType::kInt64);
  recv->set_dtype(static_cast<DTypeProto>(42));
  EXPECT_THAT(ProgramToIr(proto),
              StatusIs(absl::StatusCode::kInvalidArgument, "step 0: recv dtype: dtype 42"));
  proto.mutable_steps(0)->mutable_copy()->set_dtype(static_cast<DTypeProto>(43));
  EXPECT_THAT(ProgramToIr(proto), StatusIs(absl::StatusCode::kInvalidArgument, "copy dtype"));
  ComputeStep* c = proto.mutable_steps(0)->mutable_compute();
  c->set_op("relu");
  c->set_out_dtype(static_cast<DTypeProto>(44));
  EXPECT_THAT(ProgramToIr(proto), StatusIs(absl::StatusCode::kInvalidArgument, "out_dtype"));
}

TEST(ProgramProtoTest, WorkerStatusRoundTripsThroughProto) {
  WorkerStatusIr ir;
  ir.worker_id = 4;
  ir.address = "w:1";
  ir.blas_core = "Haswell";
  ir.blas_config = "cfg";
  ir.blas_threads = 2;
  ir.models = {{"m", 1, {0, 1}, 1024}};
  ir.programs = 3;
  ir.requests_served = 9;
  ir.gemm_gflops_one_row = 31.5;
  ir.gemm_gflops_small_m = 80.25;
  ir.gemm_gflops_large_m = 140.5;
  ir.memory_bytes_per_s = 1.5e10;
  ir.hop_ms = 0.125;
  ir.link_bytes_per_s = 2.5e9;
  ir.calibration_kernel = "DotGeneral (OpenBLAS Haswell, 1 threads)";
  WorkerStatusResponse response;
  WorkerStatusToProto(ir, &response);
  const WorkerStatusIr back = WorkerStatusFromProto(response);
  EXPECT_EQ(back.worker_id, 4);
  EXPECT_EQ(back.address, "w:1");
  EXPECT_EQ(back.blas_core, "Haswell");
  EXPECT_EQ(back.blas_config, "cfg");
  EXPECT_EQ(back.blas_threads, 2);
  ASSERT_EQ(back.models.size(), 1u);
  EXPECT_EQ(back.models[0].model, "m");
  EXPECT_EQ(back.models[0].generation, 1);
  EXPECT_EQ(back.models[0].devices, ir.models[0].devices);
  EXPECT_EQ(back.models[0].param_bytes, 1024);
  EXPECT_EQ(back.programs, 3);
  EXPECT_EQ(back.requests_served, 9);
  EXPECT_EQ(back.gemm_gflops_one_row, 31.5);
  EXPECT_EQ(back.gemm_gflops_small_m, 80.25);
  EXPECT_EQ(back.gemm_gflops_large_m, 140.5);
  EXPECT_EQ(back.memory_bytes_per_s, 1.5e10);
  EXPECT_EQ(back.hop_ms, 0.125);
  EXPECT_EQ(back.link_bytes_per_s, 2.5e9);
  EXPECT_EQ(back.calibration_kernel, ir.calibration_kernel);
}

TEST(ProgramProtoTest, DecodeStepForksRoundTripThroughProto) {
  DecodeStepIr ir;
  ir.step = 7;
  ir.spans = {{3, 10, 1}, {4, 0, 5}};
  ir.release = {2};
  ir.forks = {{3, {5, 6}, 10}};
  DecodeStep proto;
  DecodeStepToProto(ir, &proto);
  const DecodeStepIr back = DecodeStepFromProto(proto);
  EXPECT_EQ(back.step, 7);
  ASSERT_EQ(back.spans.size(), 2u);
  EXPECT_EQ(back.spans[1].seq, 4);
  EXPECT_EQ(back.spans[1].num_tokens, 5);
  EXPECT_EQ(back.release, std::vector<int64_t>({2}));
  ASSERT_EQ(back.forks.size(), 1u);
  EXPECT_EQ(back.forks[0].src, 3);
  EXPECT_EQ(back.forks[0].dsts, std::vector<int64_t>({5, 6}));
  EXPECT_EQ(back.forks[0].num_tokens, 10);
  EXPECT_OK(ValidateDecodeForks(back));
}

TEST(ProgramProtoTest, BadForksAreRefusedNamingTheValue) {
  DecodeStepIr step;
  step.step = 9;
  step.forks = {{3, {5}, 0}};
  EXPECT_THAT(ValidateDecodeForks(step),
              StatusIs(absl::StatusCode::kInvalidArgument, "fork of sequence 3 at 0 positions"));
  step.forks = {{3, {}, 4}};
  EXPECT_THAT(ValidateDecodeForks(step), StatusIs(absl::StatusCode::kInvalidArgument, "into 0"));
  step.forks = {{3, {5, 3}, 4}};
  EXPECT_THAT(ValidateDecodeForks(step),
              StatusIs(absl::StatusCode::kInvalidArgument, "sequence 3 into itself"));
  step.forks = {{3, {5}, 4}, {4, {5}, 2}};
  EXPECT_THAT(ValidateDecodeForks(step),
              StatusIs(absl::StatusCode::kInvalidArgument, "sequence 5 is forked into twice"));
  // DecodeLayout refuses them too (the worker's check before it runs a step).
  EXPECT_THAT(DecodeLayout::Create(step, 8, 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "forked into twice"));
}

}  // namespace
}  // namespace meshserve
