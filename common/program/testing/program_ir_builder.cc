#include "common/program/testing/program_ir_builder.h"

namespace meshserve {
namespace program_testing {

BoxIr IrBox(const std::vector<std::pair<int64_t, int64_t>>& dims) {
  BoxIr box;
  for (const auto& [begin, end] : dims) {
    box.begin.push_back(begin);
    box.end.push_back(end);
  }
  return box;
}

ComputeStepIr Compute(int64_t device, ComputeOp op, std::vector<std::string> inputs,
                      std::string output, BoxIr out_box, std::optional<DType> out_dtype) {
  ComputeStepIr s;
  s.op = op;
  s.inputs = std::move(inputs);
  s.output = std::move(output);
  s.out_box = std::move(out_box);
  s.out_dtype = out_dtype;
  s.device = device;
  return s;
}

SendStepIr Send(int64_t device, std::string buffer, BoxIr box, int64_t dst_worker,
                int64_t dst_device, std::string tag) {
  return SendStepIr{std::move(buffer), std::move(box), dst_worker,
                    dst_device,        std::move(tag), device};
}

RecvStepIr Recv(int64_t device, std::string buffer, BoxIr box, std::string tag, bool accumulate,
                BoxIr buffer_box, std::optional<DType> dtype, int64_t src_worker) {
  return RecvStepIr{std::move(buffer),     std::move(box), std::move(tag), accumulate,
                    std::move(buffer_box), dtype,          src_worker,     device};
}

CopyStepIr Copy(int64_t src_device, std::string src, BoxIr box, int64_t dst_device, std::string dst,
                BoxIr dst_box, std::optional<DType> dtype, bool accumulate) {
  return CopyStepIr{std::move(src), src_device,         std::move(dst), std::move(box),
                    accumulate,     std::move(dst_box), dtype,          dst_device};
}

FreeStepIr Free(int64_t device, std::string buffer) {
  return FreeStepIr{std::move(buffer), device};
}

OutputStepIr Output(int64_t device, std::string buffer, BoxIr box, std::string output) {
  return OutputStepIr{std::move(buffer), std::move(box), std::move(output), device};
}

ProgramIr ProgramOf(std::string program_id, std::string model, int64_t generation, int64_t worker,
                    std::vector<StepIr> steps) {
  ProgramIr p;
  p.program_id = std::move(program_id);
  p.model = std::move(model);
  p.generation = generation;
  p.worker = worker;
  p.steps = std::move(steps);
  return p;
}

}  // namespace program_testing
}  // namespace meshserve
