// Plain C++ mirror of proto/program.proto's Program, built by the compiler.
//
// Why a mirror: tensor.proto's `package meshserve` generates meshserve::Box and
// meshserve::DType, the names of the core types (common/sharding/box.h,
// common/base/dtype.h), so no translation unit can include both. The compiler
// works on these structs (this header includes no core type and no .pb.h);
// compiler_proto.cc, which includes only this header and program.pb.h,
// serializes them. Field meanings are program.proto's; dtypes are
// tensor.proto's DType numbers (FLOAT32 = 1, BFLOAT16 = 2, INT32 = 3, ...).
//
// Thread-safety: plain values.
#ifndef MESHSERVE_SERVER_COORDINATOR_COMPILER_IR_H_
#define MESHSERVE_SERVER_COORDINATOR_COMPILER_IR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace meshserve {

struct IrBox {
  std::vector<int64_t> begin, end;
};

struct IrStep {
  enum class Kind { kCompute, kSend, kRecv, kCopy, kFree, kOutput };
  Kind kind = Kind::kCompute;
  int64_t device = 0;  // compute/send/recv/free/output device; copy: src_device
  // compute
  std::string op;
  std::vector<std::string> inputs;
  std::string output;  // compute: buffer; output step: the output's name
  IrBox out_box;
  int out_dtype = 0;
  std::vector<int64_t> lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, perm;
  float epsilon = 0;
  bool partial = false;
  // send / recv / copy / free / output
  std::string buffer;  // copy: src
  IrBox box;
  std::string tag;
  int64_t dst_worker = -1;
  int64_t dst_device = -1;  // send, copy
  int64_t src_worker = -1;  // recv
  bool accumulate = false;
  IrBox buffer_box;  // recv: buffer_box; copy: dst_box
  int dtype = 0;     // recv, copy
  std::string dst;   // copy
};

struct IrProgram {
  std::string program_id;
  std::string model;
  int64_t generation = 0;
  int64_t worker = -1;
  std::vector<IrStep> steps;
};

// The serialized meshserve.Program (compiler_proto.cc).
std::string SerializeProgram(const IrProgram& program);
// One line per step, for debugging and `describe`.
std::string IrProgramToString(const IrProgram& program);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COMPILER_IR_H_
