// Serializes the compiler's IR (compiler_ir.h) into meshserve.Program. This
// file includes only the IR header and the generated protos (see compiler_ir.h).
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/program.pb.h"
#include "server/coordinator/compiler_ir.h"

namespace meshserve {
namespace {

template <typename ProtoBox>
void SetBox(const IrBox& box, ProtoBox* out) {
  for (int64_t b : box.begin) out->add_begin(b);
  for (int64_t e : box.end) out->add_end(e);
}

template <typename Enum>
Enum AsDType(int dtype) {
  return static_cast<Enum>(dtype);
}

void FillStep(const IrStep& s, Step* out) {
  using DT = decltype(ComputeStep().out_dtype());
  switch (s.kind) {
    case IrStep::Kind::kCompute: {
      ComputeStep* c = out->mutable_compute();
      c->set_op(s.op);
      for (const auto& in : s.inputs) c->add_inputs(in);
      c->set_output(s.output);
      SetBox(s.out_box, c->mutable_out_box());
      c->set_out_dtype(AsDType<DT>(s.out_dtype));
      for (int64_t v : s.lhs_contracting) c->add_lhs_contracting(v);
      for (int64_t v : s.rhs_contracting) c->add_rhs_contracting(v);
      for (int64_t v : s.lhs_batch) c->add_lhs_batch(v);
      for (int64_t v : s.rhs_batch) c->add_rhs_batch(v);
      for (int64_t v : s.perm) c->add_perm(v);
      c->set_epsilon(s.epsilon);
      c->set_partial(s.partial);
      c->set_device(s.device);
      break;
    }
    case IrStep::Kind::kSend: {
      SendStep* c = out->mutable_send();
      c->set_buffer(s.buffer);
      SetBox(s.box, c->mutable_box());
      c->set_dst_worker(s.dst_worker);
      c->set_dst_device(s.dst_device);
      c->set_tag(s.tag);
      c->set_device(s.device);
      break;
    }
    case IrStep::Kind::kRecv: {
      RecvStep* c = out->mutable_recv();
      c->set_buffer(s.buffer);
      SetBox(s.box, c->mutable_box());
      c->set_tag(s.tag);
      c->set_accumulate(s.accumulate);
      SetBox(s.buffer_box, c->mutable_buffer_box());
      c->set_dtype(AsDType<DT>(s.dtype));
      c->set_src_worker(s.src_worker);
      c->set_device(s.device);
      break;
    }
    case IrStep::Kind::kCopy: {
      CopyStep* c = out->mutable_copy();
      c->set_src(s.buffer);
      c->set_src_device(s.device);
      c->set_dst(s.dst);
      SetBox(s.box, c->mutable_box());
      c->set_accumulate(s.accumulate);
      SetBox(s.buffer_box, c->mutable_dst_box());
      c->set_dtype(AsDType<DT>(s.dtype));
      c->set_dst_device(s.dst_device);
      break;
    }
    case IrStep::Kind::kFree: {
      FreeStep* c = out->mutable_free();
      c->set_buffer(s.buffer);
      c->set_device(s.device);
      break;
    }
    case IrStep::Kind::kOutput: {
      OutputStep* c = out->mutable_output();
      c->set_buffer(s.buffer);
      SetBox(s.box, c->mutable_box());
      c->set_output(s.output);
      c->set_device(s.device);
      break;
    }
  }
}

std::string BoxText(const IrBox& b) {
  std::vector<std::string> dims;
  for (size_t i = 0; i < b.begin.size(); ++i) dims.push_back(absl::StrCat(b.begin[i], ":", b.end[i]));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

std::string SerializeProgram(const IrProgram& program) {
  Program p;
  p.set_program_id(program.program_id);
  p.set_model(program.model);
  p.set_generation(program.generation);
  p.set_worker(program.worker);
  for (const IrStep& s : program.steps) FillStep(s, p.add_steps());
  return p.SerializeAsString();
}

std::string IrProgramToString(const IrProgram& program) {
  std::string out = absl::StrCat("program ", program.program_id, " worker ", program.worker, "\n");
  for (const IrStep& s : program.steps) {
    switch (s.kind) {
      case IrStep::Kind::kCompute:
        absl::StrAppend(&out, "  d", s.device, " ", s.output, BoxText(s.out_box), " = ", s.op,
                        "(", absl::StrJoin(s.inputs, ", "), ")", s.partial ? " partial" : "",
                        "\n");
        break;
      case IrStep::Kind::kSend:
        absl::StrAppend(&out, "  d", s.device, " send ", s.buffer, BoxText(s.box), " -> w",
                        s.dst_worker, "/d", s.dst_device, " tag ", s.tag, "\n");
        break;
      case IrStep::Kind::kRecv:
        absl::StrAppend(&out, "  d", s.device, " recv ", s.buffer, BoxText(s.box),
                        s.accumulate ? " +=" : " =", " tag ", s.tag, "\n");
        break;
      case IrStep::Kind::kCopy:
        absl::StrAppend(&out, "  d", s.dst_device, " ", s.dst, BoxText(s.box),
                        s.accumulate ? " += " : " = ", "d", s.device, " ", s.buffer, "\n");
        break;
      case IrStep::Kind::kFree:
        absl::StrAppend(&out, "  d", s.device, " free ", s.buffer, "\n");
        break;
      case IrStep::Kind::kOutput:
        absl::StrAppend(&out, "  d", s.device, " output ", s.output, " <- ", s.buffer,
                        BoxText(s.box), "\n");
        break;
    }
  }
  return out;
}

}  // namespace meshserve
