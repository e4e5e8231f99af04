// Test helpers that build program IR by hand (program_ir.h): a box from
// (begin, end) pairs, one-line constructors for each step kind in the order of
// its proto message's most used fields, and a program from its steps. For
// tests of the IR's conversions and of the worker engine.
//
//   ProgramIr p = ProgramOf("prog", "mm", /*generation=*/1, /*worker=*/0,
//                           {Compute(0, ComputeOp::kRelu, {"in/x"}, "y", IrBox({{0, 4}})),
//                            Output(0, "y", IrBox({{0, 4}}), "y")});
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_PROGRAM_TESTING_PROGRAM_IR_BUILDER_H_
#define MESHSERVE_COMMON_PROGRAM_TESTING_PROGRAM_IR_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/dtype.h"
#include "common/program/program_ir.h"

namespace meshserve {
namespace program_testing {

// [begin_i, end_i) per dim.
BoxIr IrBox(const std::vector<std::pair<int64_t, int64_t>>& dims);

// The op fields (contracting dims, perm, epsilon, partial) stay default.
ComputeStepIr Compute(int64_t device, ComputeOp op, std::vector<std::string> inputs,
                      std::string output, BoxIr out_box,
                      std::optional<DType> out_dtype = std::nullopt);
SendStepIr Send(int64_t device, std::string buffer, BoxIr box, int64_t dst_worker,
                int64_t dst_device, std::string tag);
RecvStepIr Recv(int64_t device, std::string buffer, BoxIr box, std::string tag, bool accumulate,
                BoxIr buffer_box, std::optional<DType> dtype, int64_t src_worker);
CopyStepIr Copy(int64_t src_device, std::string src, BoxIr box, int64_t dst_device, std::string dst,
                BoxIr dst_box, std::optional<DType> dtype, bool accumulate = false);
FreeStepIr Free(int64_t device, std::string buffer);
OutputStepIr Output(int64_t device, std::string buffer, BoxIr box, std::string output);

ProgramIr ProgramOf(std::string program_id, std::string model, int64_t generation, int64_t worker,
                    std::vector<StepIr> steps = {});

}  // namespace program_testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_TESTING_PROGRAM_IR_BUILDER_H_
