// The program IR: plain C++ values for the messages of proto/program.proto
// (Program, Step, TensorSlice) and proto/worker_service.proto (LoadModelRequest,
// WorkerStatusResponse), shared by the coordinator's compiler and client
// (server/coordinator) and the worker's engine (server/worker).
//
// Why plain values and not the generated messages: the transport-free cores
// (ms_coordinator's compiler, ms_worker_engine) build, validate and run
// programs without protobuf. The IR is the wire's shape (boxes as begin/end
// vectors, dtypes as tensor.proto's DTypeProto numbers), so that a malformed
// peer message survives conversion and is rejected, with a Status naming the
// value, where the core types are built (ir_conv.h). The one proto <-> IR
// conversion is program_proto.h.
//
//   program_ir.h     this header: std only.
//   ir_conv.h        IR <-> core types (Box, DType, Mesh, BoxTensor).
//   program_proto.h  IR <-> generated messages (ms_program_proto).
//
// dtype fields hold tensor.proto's DTypeProto numbers (kWireFloat32 == FLOAT32
// == 1, ...); program_proto.cc static_asserts that they match.
//
// Thread-safety: plain values.
#ifndef MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_
#define MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshserve {

// tensor.proto's DTypeProto enum values.
enum WireDType : int {
  kWireInvalid = 0,
  kWireFloat32 = 1,
  kWireBFloat16 = 2,
  kWireInt32 = 3,
  kWireInt64 = 4,
  kWireFloat16 = 5,
  kWireFloat64 = 6,
  kWireInt8 = 7,
  kWireUInt8 = 8,
  kWireBool = 9,
};

// Half-open [begin[i], end[i]) per dim, unvalidated (BoxFromIr checks it).
struct BoxIr {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
  friend bool operator==(const BoxIr& a, const BoxIr& b) {
    return a.begin == b.begin && a.end == b.end;
  }
  friend bool operator!=(const BoxIr& a, const BoxIr& b) { return !(a == b); }
};

// TensorSlice.
struct SliceIr {
  std::string name;
  int64_t device = 0;
  BoxIr box;
  int dtype = kWireInvalid;
  std::string data;
};

// One Step of a Program, flattened (fields unused by a kind stay default).
struct StepIr {
  enum class Kind { kNone, kCompute, kSend, kRecv, kCopy, kFree, kOutput };
  Kind kind = Kind::kNone;
  // The device the step runs on: compute/send/recv/free/output `device`,
  // copy `src_device`.
  int64_t device = 0;

  // compute
  std::string op;
  std::vector<std::string> inputs;
  std::string output;  // compute: buffer; output step: the output's name
  BoxIr out_box;
  int out_dtype = kWireInvalid;
  std::vector<int64_t> lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
  std::vector<int64_t> perm;
  float epsilon = 0;
  bool partial = false;

  // send / recv / copy / free / output
  std::string buffer;  // copy: src
  BoxIr box;
  std::string tag;
  int64_t dst_worker = -1;
  int64_t dst_device = -1;  // send and copy
  int64_t src_worker = -1;  // recv
  bool accumulate = false;
  BoxIr buffer_box;  // recv: buffer_box; copy: dst_box
  int dtype = kWireInvalid;
  std::string dst;  // copy
};

struct ProgramIr {
  std::string program_id;
  std::string model;
  int64_t generation = 0;
  int64_t worker = -1;
  std::vector<StepIr> steps;
};

struct MeshAxisIr {
  std::string name;
  int64_t size = 1;
  std::string type;  // "Explicit" (or ""), "Auto", "Manual"
};

struct LoadModelIr {
  std::string model;
  int64_t generation = 0;
  std::string model_json;
  std::string model_dir;
  std::vector<MeshAxisIr> mesh;
  std::vector<int64_t> devices;
  std::vector<int64_t> device_workers;
  std::map<int64_t, std::string> worker_addresses;
};

struct HostedModelIr {
  std::string model;
  int64_t generation = 0;
  std::vector<int64_t> devices;
  int64_t param_bytes = 0;
};

struct WorkerStatusIr {
  int64_t worker_id = -1;
  std::string address;  // set by the service (the engine does not know it)
  std::string blas_core;
  std::string blas_config;
  int blas_threads = 0;
  std::vector<HostedModelIr> models;
  int64_t programs = 0;
  int64_t requests_served = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_
